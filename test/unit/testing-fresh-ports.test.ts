import { describe, expect, it } from "vitest";
import { HarnessError, startOnFreshPorts } from "../../src/testing/index.js";

class PortTaken extends Error {}

/** A stand-in server: records its start and whether it was disposed. */
interface Fake extends AsyncDisposable {
  index: number;
  ports: readonly number[];
  attempt: number;
  disposed: boolean;
}

function fake(index: number, ports: readonly number[], attempt: number): Fake {
  const f: Fake = {
    index,
    ports,
    attempt,
    disposed: false,
    [Symbol.asyncDispose]: async () => {
      f.disposed = true;
    },
  };
  return f;
}

/** Ports 1000, 1001, …: each pick is new, so a test can tell the attempts apart. */
function counter(): { pickPort: () => Promise<number>; picked: number[] } {
  const picked: number[] = [];
  return {
    picked,
    pickPort: async () => {
      picked.push(1000 + picked.length);
      return picked.at(-1)!;
    },
  };
}

const isPortTaken = (err: unknown) => err instanceof PortTaken;

describe("startOnFreshPorts", () => {
  it("fresh ports - every server gets its index, all the ports and the attempt; one attempt when nothing is taken", async () => {
    const ports = counter();
    const servers = await startOnFreshPorts(3, async (i, p, attempt) => fake(i, p, attempt), { ...ports, isPortTaken, what: "fakes" });
    expect(servers.map((s) => [s.index, s.ports, s.attempt])).toEqual([
      [0, [1000, 1001, 1002], 1],
      [1, [1000, 1001, 1002], 1],
      [2, [1000, 1001, 1002], 1],
    ]);
    expect(ports.picked).toHaveLength(3);
  });

  it("fresh ports - a port taken on the first attempt: a start still waiting is abandoned, the one that started is disposed, and all start again on new ports", async () => {
    const ports = counter();
    const made: Fake[] = [];
    let abandoned: unknown;
    const servers = await startOnFreshPorts(
      3,
      async (i, p, attempt, signal) => {
        if (attempt === 1 && i === 1) throw new PortTaken(`port ${p[1]} taken`);
        if (attempt === 1 && i === 2) {
          // A server that waits for its peers: only the signal ends its start.
          await new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
        }
        const f = fake(i, p, attempt);
        made.push(f);
        return f;
      },
      { ...ports, isPortTaken, what: "fakes" },
    ).catch((e: unknown) => {
      abandoned = e;
      return [];
    });
    expect(abandoned).toBeUndefined();
    expect(servers.map((s) => s.attempt)).toEqual([2, 2, 2]);
    expect(servers[0]!.ports).toEqual([1003, 1004, 1005]);
    expect(made.filter((f) => f.attempt === 1).map((f) => [f.index, f.disposed])).toEqual([[0, true]]);
    expect(servers.some((s) => s.disposed)).toBe(false);
  });

  it("fresh ports - a failure that is not a taken port is thrown at once, after the started servers are disposed", async () => {
    const made: Fake[] = [];
    const boom = new Error("bad config");
    const err = await startOnFreshPorts(
      2,
      async (i, p, attempt) => {
        if (i === 0) throw boom;
        const f = fake(i, p, attempt);
        made.push(f);
        return f;
      },
      { ...counter(), isPortTaken, what: "fakes" },
    ).catch((e: unknown) => e);
    expect(err).toBe(boom);
    expect(made.map((f) => [f.attempt, f.disposed])).toEqual([[1, true]]);
  });

  it("fresh ports - a taken port on every attempt ends in a HarnessError that names the attempts, with the last refusal as its cause", async () => {
    let tries = 0;
    const err = await startOnFreshPorts(
      2,
      async (_i, p, attempt) => {
        tries++;
        throw new PortTaken(`attempt ${attempt}: port ${p[0]} taken`);
      },
      { ...counter(), attempts: 3, isPortTaken, what: "two fakes" },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HarnessError);
    expect((err as Error).message).toBe(
      "could not start two fakes: another process took one of its ports before it could listen, on each of 3 attempts with fresh ports",
    );
    expect(((err as Error).cause as Error).message).toBe("attempt 3: port 1004 taken");
    expect(tries).toBe(6);
  });
});
