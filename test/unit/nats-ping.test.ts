import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { CLIENT_PING } from "../../src/bus/connection.js";
import { SERVER_PING } from "../../src/node/nats/launcher.js";

const DEPLOY = resolve(import.meta.dirname, "../../deploy");
const read = (p: string) => readFileSync(join(DEPLOY, p), "utf8");

/** How long after a client's last word every server that Kova ships or starts must have dropped it. */
const DROP_WITHIN_S = 15;

/** `ping_interval` (seconds) and `ping_max` of a nats-server config text; undefined where a key is missing. */
function pingSettings(conf: string): { intervalS?: number; max?: number } {
  const interval = /^\s*ping_interval\s*[:=]\s*"?(\d+)(ms|s|m)?"?\s*$/m.exec(conf);
  const max = /^\s*ping_max\s*[:=]\s*(\d+)\s*$/m.exec(conf);
  const unit = { ms: 0.001, s: 1, m: 60 }[interval?.[2] ?? "s"] ?? 1;
  return {
    ...(interval ? { intervalS: Number(interval[1]) * unit } : {}),
    ...(max ? { max: Number(max[1]) } : {}),
  };
}

/**
 * The latest a server drops a client that went silent: its ping timer fires every interval,
 * the first PING goes out at the first tick at least one interval after the client's last
 * word (up to 2 intervals), and the tick after `max` unanswered PINGs closes the connection.
 */
function serverDropsWithinS(s: { intervalS?: number; max?: number }): number {
  // nats-server's defaults: 2 minutes, 2 PINGs.
  return ((s.max ?? 2) + 2) * (s.intervalS ?? 120);
}

describe("NATS ping settings", () => {
  it("nats ping - every shipped server config (deploy/nats, used by compose and systemd) drops a silent client within 15 s", () => {
    for (const i of [1, 2, 3]) {
      const conf = read(`nats/cluster-n${i}.conf`);
      const s = pingSettings(conf);
      expect(s, `deploy/nats/cluster-n${i}.conf`).toEqual({ intervalS: SERVER_PING.intervalS, max: SERVER_PING.max });
      expect(serverDropsWithinS(s)).toBeLessThanOrEqual(DROP_WITHIN_S);
    }
    // docker compose and the systemd unit run these files, not configs of their own.
    const compose = parseYaml(read("docker-compose.yml")) as { services: Record<string, { volumes?: string[] }> };
    for (const i of [1, 2, 3]) expect(compose.services[`nats-${i}`]!.volumes).toContain(`./nats/cluster-n${i}.conf:/etc/nats/nats.conf:ro`);
    const unit = read("systemd/nats-server.service");
    expect(unit).toMatch(/^ExecStart=\S*nats-server -c \/etc\/nats\/nats-server\.conf$/m);
    expect(unit).toContain("cp deploy/nats/cluster-n1.conf /etc/nats/nats-server.conf");
  });

  it("nats ping - the Kubernetes NATS config drops a silent client within 15 s", () => {
    const configMap = parseAllDocuments(read("k8s/nats.yaml"))
      .map((d) => d.toJS() as { kind?: string; data?: Record<string, string> })
      .find((d) => d.kind === "ConfigMap");
    const s = pingSettings(configMap!.data!["nats.conf"]!);
    expect(s).toEqual({ intervalS: SERVER_PING.intervalS, max: SERVER_PING.max });
    expect(serverDropsWithinS(s)).toBeLessThanOrEqual(DROP_WITHIN_S);
  });

  it("nats ping - the servers Kova starts (kova node start, the test and bench harness) drop a silent client within 15 s", () => {
    // The launcher writes these into every config it generates (harness.test.ts reads them back from /varz).
    expect(serverDropsWithinS(SERVER_PING)).toBeLessThanOrEqual(DROP_WITHIN_S);
    expect(SERVER_PING.intervalS).toBeGreaterThanOrEqual(1);
  });

  it("nats ping - a node's and a client's connection notice a server that stopped answering within 15 s", () => {
    // nats.js drops the connection at the tick that finds maxOut PINGs unanswered.
    expect((CLIENT_PING.maxOut + 1) * CLIENT_PING.intervalMs).toBeLessThanOrEqual(DROP_WITHIN_S * 1000);
    expect(CLIENT_PING.maxOut).toBeGreaterThanOrEqual(2);
  });

  it("nats ping - the parser reads the forms nats-server accepts and falls back to its defaults", () => {
    expect(pingSettings('ping_interval: "3s"\nping_max: 3')).toEqual({ intervalS: 3, max: 3 });
    expect(pingSettings("ping_interval = 2m\nping_max = 2")).toEqual({ intervalS: 120, max: 2 });
    expect(serverDropsWithinS(pingSettings("listen: 0.0.0.0:4222"))).toBe(480);
  });
});
