import { describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { parseConfig, type NodeConfig } from "../../src/node/config.js";
import { parseGatewayConfig } from "../../src/gateway/config.js";
import { findNatsServerBinary } from "../../src/testing/index.js";
import { prepareNatsConfig } from "../fixtures/deploy/nats-config.js";
import { readAccountsFile } from "../fixtures/security/accounts-file.js";
import { tempDir } from "../fixtures/disposable.js";

const run = promisify(execFile);
const DEPLOY = resolve(import.meta.dirname, "../../deploy");
const read = (p: string) => readFileSync(join(DEPLOY, p), "utf8");

type Doc = Record<string, any>;

function k8sDocs(file: string): Doc[] {
  const docs = parseAllDocuments(read(file));
  for (const d of docs) expect(d.errors.map((e) => e.message)).toEqual([]);
  return docs.map((d) => d.toJS() as Doc);
}

/** Every volume a pod template mounts is declared as a volume or a claim template. */
function unmountedVolumes(sts: Doc): string[] {
  const declared = new Set<string>([
    ...(sts.spec.template.spec.volumes ?? []).map((v: Doc) => v.name),
    ...(sts.spec.volumeClaimTemplates ?? []).map((v: Doc) => v.metadata.name),
  ]);
  const mounts: string[] = sts.spec.template.spec.containers.flatMap((c: Doc) => (c.volumeMounts ?? []).map((m: Doc) => m.name));
  return mounts.filter((m) => !declared.has(m));
}

/** The unit file as sections of key → values (a key may repeat, as in systemd). */
function parseUnit(text: string): Record<string, Record<string, string[]>> {
  const out: Record<string, Record<string, string[]>> = {};
  let section = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) {
      section = header[1]!;
      out[section] = {};
      continue;
    }
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (!kv || !section) throw new Error(`not a unit line: ${line}`);
    (out[section]![kv[1]!] ??= []).push(kv[2]!);
  }
  return out;
}

describe("deploy configs", () => {
  it("deploy - the example kova.toml files load with the node's config loader and agree with each other", () => {
    const configs: NodeConfig[] = [1, 2, 3].map((i) =>
      parseConfig(read(`kova/kova-node${i}.toml`), { path: join(DEPLOY, "kova", `kova-node${i}.toml`), env: {} }),
    );
    expect(configs.map((c) => c.nodeId)).toEqual(["kova-1", "kova-2", "kova-3"]);
    for (const c of configs) {
      expect(c.cluster).toBe("default");
      expect(c.dataDir).toBe("/var/lib/kova");
      expect(c.natsUrls).toEqual(["nats://nats-1:4222", "nats://nats-2:4222", "nats://nats-3:4222"]);
      expect(c.wal.sync).toBe("full");
      expect(c.wal.ringBits).toBe(16);
      expect(c.staleAfterMs).toBeGreaterThanOrEqual(2 * c.heartbeatMs);
      // the same declared actors on every node, so placement sees one list
      expect(c.actors).toEqual(configs[0]!.actors);
    }
    expect(configs[0]!.actors.map((a) => a.type)).toEqual(["counter", "counter", "counter"]);
  });

  it("deploy - the example kova-gateway.toml loads and serves the nodes' cluster under the accounts file's gateway role", () => {
    const gw = parseConfig(read("kova/kova-gateway.toml"), {
      path: join(DEPLOY, "kova", "kova-gateway.toml"),
      env: { KOVA_GATEWAY_PASSWORD: "from-the-environment" },
    });
    const node = parseConfig(read("kova/kova-node1.toml"), { path: join(DEPLOY, "kova", "kova-node1.toml"), env: {} });
    expect(gw.cluster).toBe(node.cluster);
    expect(gw.natsUrls).toEqual(node.natsUrls);
    expect(gw.security).toMatchObject({ user: "kova-gateway", inboxPrefix: "_INBOX_gateway" });
    expect(parseGatewayConfig(gw.gateway ?? {})).toMatchObject({ host: "0.0.0.0", port: 8080, auth: "keys", keysBucket: true });
    // The role it names exists, with that inbox; the nodes' example lists the prefix they reply to.
    expect(read("nats/accounts.conf")).toMatch(/user: kova-gateway[\s\S]*?subscribe: \{ allow: \["_INBOX_gateway\.>"/);
    expect(read("kova/kova-node1.toml")).toContain('reply_prefixes = ["_INBOX_client", "_INBOX_operator", "_INBOX_gateway"]');
  });

  it("deploy - accounts.conf puts every role but the nodes in an account of its own that imports exactly what its user may publish and receive", () => {
    const { accounts, exports } = readAccountsFile(read("nats/accounts.conf"));
    expect([...accounts.keys()].sort()).toEqual(["CLIENT", "GATEWAY", "KOVA", "OPERATOR"]);
    expect(accounts.get("KOVA")!.imports).toEqual([]);
    for (const name of ["CLIENT", "OPERATOR", "GATEWAY"]) {
      const a = accounts.get(name)!;
      expect(a.publish.length, name).toBeGreaterThan(0);
      // A subject its user may publish to without an import would reach no node (no
      // responders); an import its user may not publish to would be dead weight.
      const services = a.imports.filter((i) => i.kind === "service");
      expect(services.map((i) => i.to ?? i.subject).sort(), `${name}: service imports = publish permissions`).toEqual([...a.publish].sort());
      // What its users may subscribe to arrives through a stream import, and every stream
      // import serves a subscription (a client user's own inbox sits under the role's).
      const streams = a.imports.filter((i) => i.kind === "stream").map((i) => i.subject);
      const covers = (imported: string, sub: string) => imported === sub || (imported.endsWith(".>") && sub.startsWith(imported.slice(0, -1)));
      for (const sub of a.subscribe)
        expect(
          streams.some((i) => covers(i, sub)),
          `${name}: ${sub} arrives through a stream import`,
        ).toBe(true);
      for (const i of streams)
        expect(
          a.subscribe.some((sub) => covers(i, sub)),
          `${name}: stream import ${i} serves a subscription`,
        ).toBe(true);
      for (const i of a.imports) {
        expect(i.account, `${name} imports only from KOVA`).toBe("KOVA");
        const e = exports.find((x) => x.kind === i.kind && x.subject === i.subject);
        expect(e?.accounts, `${name}: KOVA exports ${i.kind} ${i.subject} to it`).toContain(name);
      }
    }
    // Every export is imported by each account it names.
    for (const e of exports) {
      for (const name of e.accounts) {
        expect(
          accounts.get(name)!.imports.some((i) => i.kind === e.kind && i.subject === e.subject),
          `${name} imports ${e.subject}`,
        ).toBe(true);
      }
    }
    // A client is a principal (docs/security.md, "Bus principals"): the server names its user
    // on every request that leaves its account, and its durable sends reach a node's
    // ingress rather than the stream (which would drop that name); it reads no registry.
    const client = accounts.get("CLIENT")!;
    for (const i of client.imports.filter((x) => x.kind === "service")) expect(i.share, `CLIENT imports ${i.subject} with share: true`).toBe(true);
    expect(client.imports.find((i) => i.to === "kova.default.a2a.>")?.subject).toBe("kova.default.ingress.a2a.>");
    expect(client.imports.some((i) => i.subject === "kova.default.a2a.>" || i.subject.includes("KV_kova_default_agents"))).toBe(false);
    expect(read("kova/kova-node1.toml")).toContain('trusted_accounts = ["OPERATOR", "GATEWAY"]');
    // Experiments (docs/evals.md): the nodes write the evals bucket; an operator stores a spec
    // through control.eval (within its control.>) and reads the bucket, a gateway reads it,
    // the client neither.
    const evals = (name: string) =>
      accounts
        .get(name)!
        .imports.map((i) => i.subject)
        .filter((x) => x.includes("kova_default_evals") || x.startsWith("kova.default.control"));
    expect(evals("OPERATOR").sort()).toEqual([
      "$JS.API.STREAM.INFO.KV_kova_default_evals",
      "$JS.API.STREAM.MSG.GET.KV_kova_default_evals",
      "kova.default.control.>",
    ]);
    expect(evals("GATEWAY").sort()).toEqual([
      "$JS.API.STREAM.INFO.KV_kova_default_evals",
      "$JS.API.STREAM.MSG.GET.KV_kova_default_evals",
      "kova.default.control.activate",
    ]);
    expect(evals("CLIENT")).toEqual(["kova.default.control.activate"]);
    // Requests answered more than once: every node's $SRV answer, a pull's messages.
    const multi = exports.filter((e) => e.responseType === "stream").map((e) => e.subject);
    expect(multi.sort()).toEqual(["$JS.API.CONSUMER.MSG.NEXT.KOVA_DEFAULT_EVENTS.>", "$SRV.>"]);
  });

  it("deploy - docker-compose.yml runs 3 NATS servers and 3 Kova nodes wired to files that exist", () => {
    const compose = parseYaml(read("docker-compose.yml"), { merge: true }) as Doc;
    const services = compose.services as Record<string, Doc>;
    const nats = Object.keys(services).filter((s) => /^nats-\d$/.test(s));
    const kova = Object.keys(services).filter((s) => /^kova-\d$/.test(s));
    expect(nats).toEqual(["nats-1", "nats-2", "nats-3"]);
    expect(kova).toEqual(["kova-1", "kova-2", "kova-3"]);
    const mountedFile = (svc: Doc, target: string) => {
      const v = (svc.volumes as string[]).find((m) => m.split(":")[1] === target);
      expect(v, `${target} mounted`).toBeDefined();
      return v!.split(":")[0]!;
    };
    nats.forEach((name, i) => {
      const svc = services[name]!;
      expect(svc.image).toMatch(/^nats:2\.(1[0-9]|[2-9][0-9])/); // 2.10+ for sync_interval
      expect(svc.command).toEqual(["-c", "/etc/nats/nats.conf"]);
      expect(mountedFile(svc, "/etc/nats/nats.conf")).toBe(`./nats/cluster-n${i + 1}.conf`);
      expect(svc.healthcheck.test.join(" ")).toContain("/healthz");
      // the server name in the mounted config is the compose host name used in routes
      expect(read(`nats/cluster-n${i + 1}.conf`)).toMatch(new RegExp(`^server_name: ${name}$`, "m"));
    });
    kova.forEach((name, i) => {
      const svc = services[name]!;
      expect(mountedFile(svc, "/etc/kova/kova.toml")).toBe(`./kova/kova-node${i + 1}.toml`);
      expect(Object.keys(svc.depends_on)).toEqual(nats);
      expect(Object.values(svc.depends_on).every((d: any) => d.condition === "service_healthy")).toBe(true);
      expect(existsSync(resolve(DEPLOY, svc.build.context, svc.build.dockerfile))).toBe(true);
      expect(svc.stop_signal).toBe("SIGTERM");
    });
    const namedVolumes = Object.values(services)
      .flatMap((s) => (s.volumes ?? []) as string[])
      .map((v) => v.split(":")[0]!)
      .filter((src) => !src.startsWith("."));
    for (const v of namedVolumes) expect(compose.volumes).toHaveProperty(v);
    for (const src of Object.values(services)
      .flatMap((s) => (s.volumes ?? []) as string[])
      .map((v) => v.split(":")[0]!)) {
      if (src.startsWith(".")) expect(existsSync(resolve(DEPLOY, src)), src).toBe(true);
    }
  });

  it("deploy - the Dockerfile copies files that exist and runs `kova node start` with the mounted config", () => {
    const lines = read("Dockerfile")
      .split("\n")
      .filter((l) => /^[A-Z]+ /.test(l));
    const root = resolve(DEPLOY, "..");
    const sources = lines.filter((l) => l.startsWith("COPY ") && !l.includes("--from=")).flatMap((l) => l.split(/\s+/).slice(1, -1));
    expect(sources.length).toBeGreaterThan(3);
    for (const src of sources) expect(existsSync(join(root, src)), src).toBe(true);
    const entrypoint = JSON.parse(lines.find((l) => l.startsWith("ENTRYPOINT "))!.slice("ENTRYPOINT ".length)) as string[];
    const cmd = JSON.parse(lines.find((l) => l.startsWith("CMD "))!.slice("CMD ".length)) as string[];
    expect(entrypoint).toEqual(["node", "/opt/kova/bin/kova.js"]);
    expect(cmd).toEqual(["node", "start", "--config", "/etc/kova/kova.toml"]);
    expect(lines.filter((l) => l.startsWith("FROM ")).every((l) => /node:(2\d|[3-9]\d)/.test(l))).toBe(true); // Node 20+
  });

  it("deploy - Kubernetes manifests parse and reference what they declare", async () => {
    const kustomization = parseYaml(read("k8s/kustomization.yaml")) as Doc;
    for (const r of kustomization.resources as string[]) expect(existsSync(join(DEPLOY, "k8s", r)), r).toBe(true);
    const docs = (kustomization.resources as string[]).flatMap((r) => k8sDocs(`k8s/${r}`));
    const byKind = (kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata?.name === name);

    const natsSts = byKind("StatefulSet", "nats")!;
    expect(natsSts.spec.replicas).toBe(3);
    expect(byKind("Service", natsSts.spec.serviceName)?.spec.clusterIP).toBe("None");
    expect(unmountedVolumes(natsSts)).toEqual([]);
    const natsConfigMap = byKind("ConfigMap", natsSts.spec.template.spec.volumes.find((v: Doc) => v.configMap).configMap.name)!;
    const natsConf: string = natsConfigMap.data["nats.conf"];
    expect(natsConf).toMatch(/sync_interval: always/);
    expect(natsConf).toMatch(/server_name: \$POD_NAME/);
    const routes = [...natsConf.matchAll(/nats-route:\/\/([\w.-]+):6222/g)].map((m) => m[1]);
    expect(routes).toEqual([0, 1, 2].map((i) => `nats-${i}.${natsSts.spec.serviceName}`));
    expect(natsSts.spec.template.spec.containers[0].env).toContainEqual({
      name: "POD_NAME",
      valueFrom: { fieldRef: { fieldPath: "metadata.name" } },
    });
    expect(byKind("PodDisruptionBudget", "nats")?.spec.maxUnavailable).toBe(1);

    const kovaSts = byKind("StatefulSet", "kova")!;
    expect(kovaSts.spec.replicas).toBe(3);
    expect(byKind("Service", kovaSts.spec.serviceName)?.spec.clusterIP).toBe("None");
    expect(unmountedVolumes(kovaSts)).toEqual([]);
    const container = kovaSts.spec.template.spec.containers[0];
    expect(container.args).toEqual(["node", "start", "--config", "/etc/kova/kova.toml"]);
    const kovaConfigMap = byKind("ConfigMap", kovaSts.spec.template.spec.volumes.find((v: Doc) => v.configMap).configMap.name)!;
    const cfg = parseConfig(kovaConfigMap.data["kova.toml"], { path: "/etc/kova/kova.toml", env: { KOVA_NODE_ID: "kova-0" } });
    expect(cfg.nodeId).toBe("kova-0");
    expect(container.env.find((e: Doc) => e.name === "KOVA_NODE_ID").valueFrom.fieldRef.fieldPath).toBe("metadata.name");
    expect(cfg.natsUrls).toEqual(routes.map((r) => `nats://${r}:4222`));
    expect(kovaSts.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(30);

    // nats-server itself accepts the ConfigMap's config (`-t`: check and exit).
    const bin = findNatsServerBinary();
    expect(bin, "nats-server binary").toBeDefined();
    await using tmp = await tempDir("kova-k8s-");
    const dir = tmp.path;
    const conf = await prepareNatsConfig(bin!, natsConf, {
      storeDir: join(dir, "js"),
      replace: [["/var/run/nats/nats.pid", join(dir, "nats.pid")]],
    });
    await writeFile(join(dir, "nats.conf"), conf.text);
    const out = await run(bin!, ["-t", "-c", join(dir, "nats.conf")], { env: { ...process.env, POD_NAME: "nats-0" } });
    expect(out.stdout + out.stderr).toContain("is valid");
  });

  it("deploy - the systemd units start the node with its config and drain on SIGTERM", async () => {
    const unit = parseUnit(read("systemd/kova-node.service"));
    expect(Object.keys(unit)).toEqual(["Unit", "Service", "Install"]);
    expect(unit.Service!.ExecStart![0]).toMatch(/bin\/kova\.js node start --config \/etc\/kova\/kova\.toml$/);
    expect(unit.Service!.KillSignal).toEqual(["SIGTERM"]);
    expect(Number.parseInt(unit.Service!.TimeoutStopSec![0]!, 10)).toBeGreaterThanOrEqual(30);
    expect(unit.Service!.StateDirectory).toEqual(["kova"]); // /var/lib/kova, the data_dir of the examples
    expect(unit.Install!.WantedBy).toEqual(["multi-user.target"]);
    const nats = parseUnit(read("systemd/nats-server.service"));
    expect(nats.Service!.KillSignal).toEqual(["SIGUSR2"]); // lame duck mode
    expect(nats.Service!.ExecStart![0]).toMatch(/nats-server -c \S+\.conf$/);

    // systemd's own checker, where the machine has it: it reports unknown keys and bad values.
    const analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].find((p) => existsSync(p));
    if (analyze) {
      for (const file of ["systemd/kova-node.service", "systemd/nats-server.service"]) {
        const path = join(DEPLOY, file);
        const out = await run(analyze, ["verify", path]).catch((e: { stdout: string; stderr: string }) => e);
        const complaints = `${out.stdout}\n${out.stderr}`.split("\n").filter((l) => l.includes(path));
        expect(complaints).toEqual([]);
      }
    }
  });
});
