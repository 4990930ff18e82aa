import { describe, expect, it } from "vitest";
import { checkEndpoint, checkSpecOnCluster, defineExperiment, evalTrustFrom, type EvalAgentsPort } from "../../src/eval/index.js";
import type { Bus } from "../../src/bus/index.js";
import type { Resolver } from "../../src/tools/index.js";

const strict = evalTrustFrom({ env: { A2A_TOKEN: "http://127.0.0.1:8080" } }, "/");
const lenient = evalTrustFrom({ allow_private_endpoints: true }, "/");
/** A resolver with fixed answers, so names are tested without the network. */
const names: Record<string, string> = { "inside.example": "127.0.0.1", "intranet.example": "10.1.2.3", "public.example": "93.184.216.34" };
const resolver: Resolver = (host) =>
  names[host] ? Promise.resolve([{ address: names[host]!, family: 4 }]) : Promise.reject(Object.assign(new Error(`${host} not found`), { code: "ENOTFOUND" }));

describe("the addresses experiments' external subjects may be at ([eval] allow_private_endpoints)", () => {
  it("eval - loopback, private, link-local and metadata addresses are refused by default, naming the field and the setting; public ones pass", async () => {
    const refused = [
      ["http://127.0.0.1:9/v1", /127\.0\.0\.1 is a loopback address/],
      ["http://localhost:9/v1", /localhost resolves to 127\.0\.0\.1, a loopback address/],
      ["http://inside.example/v1", /inside\.example resolves to 127\.0\.0\.1, a loopback address/],
      ["http://intranet.example/a2a", /10\.1\.2\.3, a private address \(10\/8\)/],
      ["http://192.168.1.5/a2a", /a private address \(192\.168\/16\)/],
      ["http://169.254.10.1/a2a", /a link-local address/],
      ["http://[::1]:8080/a2a", /::1 is a loopback address/],
      ["http://0x7f.1/v1", /127\.0\.0\.1 is a loopback address/],
    ] as const;
    for (const [url, why] of refused) {
      const check = checkEndpoint(url, strict, "subjects[0].a2a", resolver);
      await expect(check, url).rejects.toThrow(why);
      await expect(check, url).rejects.toThrow(/^subjects\[0\]\.a2a: .* is refused: .*\[eval\] allow_private_endpoints = true in the nodes' kova\.toml/);
    }
    await expect(checkEndpoint("http://169.254.169.254/latest/meta-data", strict, "subjects[1].a2a", resolver)).rejects.toThrow(
      "subjects[1].a2a: http://169.254.169.254/latest/meta-data is refused: 169.254.169.254 is a cloud metadata endpoint: always refused",
    );
    await expect(checkEndpoint("https://public.example/v1", strict, "f", resolver)).resolves.toBeUndefined();
    await expect(checkEndpoint("https://93.184.216.34/v1", strict, "f", resolver)).resolves.toBeUndefined();
    // A name that does not resolve is not refused: the call fails on its own.
    await expect(checkEndpoint("https://gone.example/v1", strict, "f", resolver)).resolves.toBeUndefined();
  });

  it("eval - allow_private_endpoints = true lets experiments reach loopback and private networks, never the metadata endpoint", async () => {
    for (const url of ["http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://inside.example/v1", "http://intranet.example/a2a", "http://[::1]:8080/a2a"]) {
      await expect(checkEndpoint(url, lenient, "f", resolver), url).resolves.toBeUndefined();
    }
    await expect(checkEndpoint("http://169.254.169.254/", lenient, "f", resolver)).rejects.toThrow(/a cloud metadata endpoint: always refused/);
    await expect(checkEndpoint("http://[fd00:ec2::254]/", lenient, "f", resolver)).rejects.toThrow(/a cloud metadata endpoint: always refused/);
    expect(() => evalTrustFrom({ allow_private_endpoints: "yes" }, "/")).toThrow(/^eval\.allow_private_endpoints: /);
  });

  it("eval - a spec whose external subject is at a refused address fails at start, naming the field; with the allowance it passes", async () => {
    const agents: EvalAgentsPort = { definitions: () => [], runtime: () => undefined };
    const bus = {} as Bus;
    const spec = (subject: Record<string, unknown>) =>
      defineExperiment({ experiment: { name: "ssrf" }, subjects: [subject], tasks: [{ id: "t", input: "q", expected: "a" }], verifiers: [{ type: "exact" }] });
    const openai = spec({ id: "o", openai: { base_url: "http://localhost:11434/v1", model: "m" } });
    const a2a = spec({ id: "a", a2a: "http://169.254.169.254/latest/meta-data/iam" });
    await expect(checkSpecOnCluster(openai, { agents, bus, trust: strict })).rejects.toThrow(
      /^subjects\[0\]\.openai\.base_url: http:\/\/localhost:11434\/v1 is refused: localhost resolves to 127\.0\.0\.1, a loopback address: .*allow_private_endpoints = true/,
    );
    await expect(checkSpecOnCluster(a2a, { agents, bus, trust: strict })).rejects.toThrow(/^subjects\[0\]\.a2a: .*a cloud metadata endpoint: always refused/);
    await expect(checkSpecOnCluster(a2a, { agents, bus, trust: lenient })).rejects.toThrow(/^subjects\[0\]\.a2a: .*always refused/);
    await expect(checkSpecOnCluster(openai, { agents, bus, trust: lenient })).resolves.toBeUndefined();
  });
});
