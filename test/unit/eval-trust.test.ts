import { describe, expect, it, onTestFinished } from "vitest";
import { parseConfig } from "../../src/node/index.js";
import { a2aHeaders, defineExperiment, evalTrustFrom, openAiConfig, trustedEnvValue, type EvalTrust } from "../../src/eval/index.js";

const env = { OPENAI_API_KEY: "sk-node", A2A_TOKEN: "Bearer node", NATS_PASSWORD: "secret" };
const trust = evalTrustFrom(
  { env: { OPENAI_API_KEY: "https://api.openai.com/v1", A2A_TOKEN: ["https://agents.example.com/a2a", "http://127.0.0.1:8080"] } },
  "/",
);

describe("what a node lets experiments read ([eval] of kova.toml)", () => {
  it("eval - a variable goes only to the endpoints listed with it: same origin, the same path or below it by whole segments", () => {
    const read = (name: string, url: string) => trustedEnvValue(trust, name, url, "f.api_key_env", "f.base_url", env);
    expect(read("OPENAI_API_KEY", "https://api.openai.com/v1")).toBe("sk-node");
    expect(read("OPENAI_API_KEY", "https://api.openai.com/v1/")).toBe("sk-node");
    expect(read("A2A_TOKEN", "https://agents.example.com/a2a/helper")).toBe("Bearer node");
    expect(read("A2A_TOKEN", "http://127.0.0.1:8080/anything")).toBe("Bearer node");
    for (const url of [
      "https://api.openai.com.attacker.example/v1",
      "https://api.openai.com/v1evil",
      "https://api.openai.com/v2",
      "http://api.openai.com/v1",
      "https://api.openai.com:8443/v1",
      "https://attacker.example/v1?u=https://api.openai.com/v1",
      "not a url",
    ]) {
      expect(() => read("OPENAI_API_KEY", url), url).toThrow("f.base_url: ");
    }
    expect(() => read("OPENAI_API_KEY", "https://attacker.example/v1")).toThrow(
      "f.base_url: https://attacker.example/v1 is not an endpoint [eval.env] lets OPENAI_API_KEY go to (it allows https://api.openai.com/v1)",
    );
    expect(() => read("NATS_PASSWORD", "https://api.openai.com/v1")).toThrow(
      /^f\.api_key_env: "NATS_PASSWORD" is not a variable this node lets experiments read: .*\(OPENAI_API_KEY, A2A_TOKEN\).*add NATS_PASSWORD = "https:\/\/api\.openai\.com\/v1" under \[eval\.env\]/,
    );
    expect(() => trustedEnvValue(trust, "OPENAI_API_KEY", "https://api.openai.com/v1", "f.api_key_env", "f.base_url", {})).toThrow(
      "f.api_key_env: environment variable OPENAI_API_KEY is not set on this node",
    );
  });

  it("eval - an external subject's key and headers are read through it, naming the spec's field; no [eval] reads nothing, a key file never", () => {
    const spec = defineExperiment({
      experiment: { name: "ext" },
      subjects: [
        { id: "o", openai: { base_url: "https://attacker.example/v1", model: "m", api_key_env: "OPENAI_API_KEY" } },
        { id: "d", openai: { model: "m", api_key_env: "OPENAI_API_KEY" } },
        { id: "a", a2a: "https://agents.example.com/a2a/x", headers_env: { Authorization: "A2A_TOKEN" } },
        { id: "n", openai: { base_url: "http://127.0.0.1:9/v1", model: "m" } },
      ],
      tasks: [{ input: "q", expected: "a" }],
      verifiers: [{ type: "exact" }],
    });
    const [o, d, a, n] = spec.subjects as Array<Parameters<typeof openAiConfig>[0]>;
    // The node's environment is the process's: set for this test only.
    const saved = { OPENAI_API_KEY: process.env.OPENAI_API_KEY, A2A_TOKEN: process.env.A2A_TOKEN };
    Object.assign(process.env, { OPENAI_API_KEY: "sk-test", A2A_TOKEN: "Bearer test" });
    onTestFinished(() => {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    });
    expect(() => openAiConfig(o!, trust, "subjects[0]")).toThrow(/^subjects\[0\]\.openai\.base_url: https:\/\/attacker\.example\/v1 is not an endpoint/);
    // the default endpoint is checked as any other
    expect(openAiConfig(d!, trust, "subjects[1]").baseUrl).toBe("https://api.openai.com/v1");
    expect(a2aHeaders(a as never, trust, "subjects[2]")).toEqual({ Authorization: "Bearer test" });
    const none: EvalTrust = evalTrustFrom(undefined, "/");
    expect(() => openAiConfig(d!, none, "subjects[1]")).toThrow(/^subjects\[1\]\.openai\.api_key_env: "OPENAI_API_KEY" is not a variable .*\(none\)/);
    expect(() => a2aHeaders(a as never, none, "subjects[2]")).toThrow(/^subjects\[2\]\.headers_env\.Authorization: "A2A_TOKEN" is not a variable/);
    // an endpoint without a key needs nothing
    expect(openAiConfig(n!, none, "subjects[3]").baseUrl).toBe("http://127.0.0.1:9/v1");
    // a stored spec is not checked by defineExperiment: a key file in one is refused on the node
    const withFile = { ...d!, openai: { model: "m", api_key_file: "/etc/kova/nats.creds" } };
    expect(() => openAiConfig(withFile, trust, "subjects[1]")).toThrow(/^subjects\[1\]\.openai\.api_key_file: a spec may not name a file of the node/);
  });

  it("eval - kova.toml's [eval]: variables with their endpoints, verifier directories from the file's directory; mistakes name the key", () => {
    const config = parseConfig(
      ["[eval]", 'verifier_dirs = ["./verifiers", "/opt/kova/verifiers"]', "[eval.env]", 'OPENAI_API_KEY = "https://api.openai.com/v1"'].join("\n"),
      { path: "/etc/kova/kova.toml", env: {} },
    );
    expect(config.eval?.verifierDirs).toEqual(["/etc/kova/verifiers", "/opt/kova/verifiers"]);
    expect([...(config.eval?.env.keys() ?? [])]).toEqual(["OPENAI_API_KEY"]);
    expect(parseConfig("", { env: {} }).eval).toBeUndefined();
    const bad = (toml: string) => () => parseConfig(toml, { env: {} });
    expect(bad('[eval]\nverifier_dir = ["x"]')).toThrow("eval.verifier_dir: unknown key: did you mean eval.verifier_dirs?");
    expect(bad("[eval.env]\nOPENAI_API_KEY = true")).toThrow(/^eval\.env\.OPENAI_API_KEY: must be an array of strings/);
    expect(bad("[eval.env]\nOPENAI_API_KEY = []")).toThrow(/^eval\.env\.OPENAI_API_KEY: must name the endpoint its value may be sent to/);
    expect(bad('[eval.env]\nOPENAI_API_KEY = "https://user:pw@api.openai.com/v1"')).toThrow(
      /^eval\.env\.OPENAI_API_KEY: must be an http\(s\) URL without credentials/,
    );
    expect(bad('[eval.env]\nK = ["https://a.example", "ftp://b.example"]')).toThrow(/^eval\.env\.K\[1\]: must be an http\(s\) URL/);
    expect(bad('[eval.env]\n"NOT-A-NAME" = "https://a.example"')).toThrow(/^eval\.env\.NOT-A-NAME: must be an environment variable's name/);
  });
});
