import { Kvm } from "@nats-io/kv";
import { open } from "lmdb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildProgram } from "../../src/cli/main.js";
import { Bus } from "../../src/bus/bus.js";
import { isKovaError, type KovaError } from "../../src/core/errors.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { cliFlags, role, startAccountsServer } from "../fixtures/security/accounts.js";
import { uniqueCluster } from "../fixtures/bus/helpers.js";
import { tempDir } from "../fixtures/disposable.js";
import { goldenJson, withVersion } from "../fixtures/formats.js";

/**
 * The CLI's failures carry the code that says what went wrong: a bad argument is
 * INVALID_ARGUMENT, a cluster that does not exist UNKNOWN_CLUSTER, a server without
 * JetStream JETSTREAM_UNAVAILABLE, and a refusal by the server's permissions stays
 * PERMISSION_DENIED instead of being reported as one of those. The commands run in this
 * process (buildProgram, as bin/kova.js does) so the test sees the typed error itself.
 */
async function kovaFails(args: string[]): Promise<KovaError> {
  const program = await buildProgram();
  program.exitOverride();
  let failure: unknown;
  try {
    await program.parseAsync(args, { from: "user" });
  } catch (err) {
    failure = err;
  }
  if (!isKovaError(failure)) throw new Error(`kova ${args.join(" ")}: expected a KovaError, got ${String(failure)}`);
  return failure;
}

let js: NatsServerHandle;
let plain: NatsServerHandle;
beforeAll(async () => {
  [js, plain] = await Promise.all([startNatsServer({ allowExternal: false }), startNatsServer({ allowExternal: false, jetstream: false })]);
});
afterAll(async () => {
  await Promise.all([js?.stop(), plain?.stop()]);
});

describe("CLI errors are typed", () => {
  it("cli - an unknown signal, a bad --timeout, --limit, --max or --payload and an ask without text are INVALID_ARGUMENT naming the argument", async () => {
    const at = ["-s", js.url, "--cluster", uniqueCluster()];
    const cases: Array<[string[], string]> = [
      [["signal", "c1", "explode", ...at], "signal"],
      [["ask", "helper", ...at], "text"],
      [["ask", "helper", "--type", "task_delegate", "--timeout", "soon", ...at], "--timeout"],
      [["request", "helper", "--type", "info_request", "--timeout", "0", ...at], "--timeout"],
      [["dlq", "ls", "--limit", "-3", ...at], "--limit"],
      [["events", "tail", "--max", "none", ...at], "--max"],
      [["send", "helper", "--type", "task_delegate", "--payload", "{nope", ...at], "--payload"],
    ];
    for (const [args, argument] of cases) {
      const err = await kovaFails(args);
      expect(err.code, args.join(" ")).toBe("INVALID_ARGUMENT");
      expect(err.data, args.join(" ")).toMatchObject({ argument });
    }
  }, 60_000);

  it("cli - wal inspect and verify of a directory that holds no WAL (nothing there, or LMDB that is not a Kova WAL) are INVALID_ARGUMENT naming dir", async () => {
    await using empty = await tempDir("kova-cli-nowal-");
    await using other = await tempDir("kova-cli-lmdb-");
    const db = open({ path: other.path });
    await db.put("k", 1);
    await db.close();
    for (const [dir, says] of [
      [empty.path, "data.mdb missing"],
      [other.path, "not a Kova WAL"],
    ]) {
      for (const cmd of ["inspect", "verify"]) {
        const err = await kovaFails(["wal", cmd, dir!]);
        expect(err.code, `${cmd} ${says}`).toBe("INVALID_ARGUMENT");
        expect(err.data).toMatchObject({ argument: "dir" });
        expect(err.message).toContain(says);
      }
    }
  });

  it("cli - kova workflow status and ls refuse a run whose state a newer Kova wrote (UNSUPPORTED_FORMAT naming it) instead of misreading it", async () => {
    const cluster = uniqueCluster();
    await using bus = await Bus.connect({ servers: js.url, cluster });
    await bus.ensureStreams();
    const runId = "wf-0123456789abcdef0123";
    const state = withVersion("workflow", "run-state-v1.json", 2);
    const checkpoint = { ...(goldenJson("actors", "checkpoint-v2.json") as object), state, type: "workflow" };
    const kvm = new Kvm(bus.nc);
    await (await kvm.create(`kova_${cluster}_checkpoints`, { history: 1 })).put(runId, JSON.stringify(checkpoint));
    const record = { ...(goldenJson("node", "agent-record-v1-tagged.json") as object), id: runId, type: "workflow" };
    await (await kvm.create(`kova_${cluster}_agents`, { history: 1 })).put(runId, JSON.stringify(record));
    for (const args of [
      ["workflow", "status", runId],
      ["workflow", "ls"],
    ]) {
      const err = await kovaFails([...args, "-s", js.url, "--cluster", cluster]);
      expect(err.code, args.join(" ")).toBe("UNSUPPORTED_FORMAT");
      expect(err.data, args.join(" ")).toMatchObject({ record: `state of workflow run ${runId}`, version: 2, readable: [1] });
    }
  }, 60_000);

  it("cli - a cluster that does not exist is UNKNOWN_CLUSTER naming it, for one agent's record and for a listing", async () => {
    const cluster = uniqueCluster();
    for (const args of [
      ["signal", "c1", "pause"],
      ["tools", "ls", "c1"],
      ["agents", "ls"],
    ]) {
      const err = await kovaFails([...args, "-s", js.url, "--cluster", cluster]);
      expect(err.code, args.join(" ")).toBe("UNKNOWN_CLUSTER");
      expect(err.message).toContain(`no cluster "${cluster}" here`);
    }
  }, 60_000);

  it("cli - a NATS server without JetStream is JETSTREAM_UNAVAILABLE, for the CLI and for Bus.connect", async () => {
    const err = await kovaFails(["send", "a", "--type", "task_delegate", "-s", plain.url, "--cluster", uniqueCluster()]);
    expect(err.code).toBe("JETSTREAM_UNAVAILABLE");
    expect(err.message).toContain("start nats-server with -js");
    const direct = await Bus.connect({ servers: plain.url, cluster: uniqueCluster() }).catch((e: unknown) => e);
    expect(isKovaError(direct, "JETSTREAM_UNAVAILABLE"), String(direct)).toBe(true);
  }, 60_000);

  it("cli - a refusal by the server's permissions stays PERMISSION_DENIED, naming the subject, instead of UNKNOWN_CLUSTER or JETSTREAM_UNAVAILABLE", async () => {
    await using dir = await tempDir("kova-cli-errors-");
    await using server = await startAccountsServer(dir.path);
    // A client may not read the registry: kova signal is an operator's command.
    const signal = await kovaFails(["signal", "c1", "pause", "--server", server.url, ...cliFlags("client")]);
    expect(signal.code).toBe("PERMISSION_DENIED");
    expect(signal.data).toMatchObject({ subject: "$JS.API.STREAM.MSG.GET.KV_kova_default_agents" });
    // Nor call $JS.API.INFO, the check Bus.connect makes unless told not to.
    const connectErr = await Bus.connect({ servers: server.url, security: role("client") }).catch((e: unknown) => e);
    expect(isKovaError(connectErr, "PERMISSION_DENIED"), String(connectErr)).toBe(true);
    expect((connectErr as KovaError).data).toMatchObject({ subject: "$JS.API.INFO" });
  }, 60_000);
});
