import { freePort } from "../node/index.js";
import { HarnessError } from "./errors.js";

export interface FreshPortsOptions {
  /** Picks a port that is free now (default `freePort`); tests inject one that returns a taken port. */
  pickPort?: () => Promise<number>;
  /** Starts to try before giving up (default 5). */
  attempts?: number;
}

export interface StartOnFreshPortsOptions extends FreshPortsOptions {
  /** True for a start that failed only because one of its ports was taken meanwhile. */
  isPortTaken: (err: unknown) => boolean;
  /** Named in the error after the last attempt, e.g. "a 3-server NATS cluster". */
  what: string;
}

const DEFAULT_ATTEMPTS = 5;

/**
 * Starts `count` servers that must know their listen ports before any of them starts:
 * a nats-server cluster's route ports, which every server lists in its routes (where a
 * server may pick its own port, `-1` and `ports_file_dir` are the race-free way). A port
 * picked free (bound to 0 and closed) can be taken by any process on the machine before
 * the server binds it, so when a start fails with the port taken, the servers that did
 * start are stopped and all start again on fresh ports, up to `attempts` times.
 * `startOne` gets the server's index, every server's port, the attempt (from 1) and a
 * signal that abandons its start when another start of the attempt failed (it rejects
 * with that failure then).
 * @returns the servers, in index order
 * @throws the first start's error when it is not a taken port; HarnessError when every
 *   attempt found a port taken
 */
export async function startOnFreshPorts<T extends AsyncDisposable>(
  count: number,
  startOne: (index: number, ports: readonly number[], attempt: number, signal: AbortSignal) => Promise<T>,
  o: StartOnFreshPortsOptions,
): Promise<T[]> {
  const pickPort = o.pickPort ?? freePort;
  const attempts = o.attempts ?? DEFAULT_ATTEMPTS;
  let lastTaken: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const ports: number[] = [];
    for (let i = 0; i < count; i++) ports.push(await pickPort());
    // A failed start abandons the attempt's others at once: they would wait for a peer that never comes.
    const abandon = new AbortController();
    const settled = await Promise.allSettled(
      ports.map((_, i) =>
        startOne(i, ports, attempt, abandon.signal).catch((err: unknown) => {
          abandon.abort(err);
          throw err;
        }),
      ),
    );
    const started = settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    if (started.length === count) return started;
    await Promise.all(started.map((s) => s[Symbol.asyncDispose]()));
    const errors = settled.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    lastTaken = errors.find((e) => o.isPortTaken(e));
    if (lastTaken === undefined) throw errors[0];
  }
  throw new HarnessError(
    `could not start ${o.what}: another process took one of its ports before it could listen, on each of ${attempts} attempts with fresh ports`,
    lastTaken,
  );
}
