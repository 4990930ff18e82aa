import { describe, expect, it } from "vitest";
import type { Msg } from "@nats-io/transport-node";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { nodeSubject, spawnSubject } from "../../src/cluster/control.js";
import { inProcessNode } from "../fixtures/node/in-process-node.js";

/** The status header and the error body of a failed `kova-node` request. */
function failure(reply: Msg): { status: string | undefined; code: string; message: string } {
  const body = reply.json<{ code: string; message: string }>();
  return { status: reply.headers?.get("Nats-Service-Error-Code"), code: body.code, message: body.message };
}

describe("kova-node answers by the kind of the error", () => {
  it("control - bad input is 400 with its code (an unknown signal, an unknown actor type), a missing actor 404", async () => {
    await using rig = await inProcessNode({ types: new ActorTypeRegistry([counterActor]) });
    const { nc, cluster } = rig;
    const signal = nodeSubject(cluster, "n1", "signal");

    const badSignal = failure(await nc.request(signal, JSON.stringify({ actorId: "c1", signal: "explode" }), { timeout: 5_000 }));
    expect(badSignal).toMatchObject({ status: "400", code: "INVALID_ARGUMENT" });
    expect(badSignal.message).toContain("use pause, resume, interrupt, kill or model=<name>");

    const badType = failure(await nc.request(spawnSubject(cluster), JSON.stringify({ id: "w1", type: "no-such-type" }), { timeout: 5_000 }));
    expect(badType).toMatchObject({ status: "400", code: "UNKNOWN_ACTOR_TYPE" });
    expect(badType.message).toContain("counter");

    const badId = failure(await nc.request(spawnSubject(cluster), JSON.stringify({ id: "a.b", type: "counter" }), { timeout: 5_000 }));
    expect(badId).toMatchObject({ status: "400", code: "INVALID_ID" });

    const absent = failure(await nc.request(signal, JSON.stringify({ actorId: "nobody", signal: "pause" }), { timeout: 5_000 }));
    expect(absent).toMatchObject({ status: "404", code: "NOT_HOSTED" });
  }, 60_000);
});
