import { ErrorCode, isKovaError, sleep, type Logger } from "../../core/index.js";
import { BusErrorCode, isTransientNatsError } from "../../bus/index.js";

/**
 * Runs a start-up step, waiting for NATS: nodes are often started together with their
 * NATS servers (compose, Kubernetes), and a fresh NATS cluster answers "JetStream not
 * enabled" or times out until it has elected its JetStream leaders. Its own file because
 * every step of the node's start order goes through it, and what counts as transient is
 * a decision of its own.
 * @throws the step's error when it is not transient, or after `startupWaitMs` (60 s)
 */
export async function whenNatsReady<T>(log: Logger, what: string, step: () => Promise<T>, startupWaitMs = 60_000): Promise<T> {
  const deadline = performance.now() + startupWaitMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await step();
    } catch (err) {
      const transient =
        isKovaError(err, BusErrorCode.NATS_UNREACHABLE) ||
        isKovaError(err, BusErrorCode.JETSTREAM_UNAVAILABLE) ||
        isKovaError(err, ErrorCode.TIMEOUT) ||
        isTransientNatsError(err);
      if (!transient || performance.now() > deadline) throw err;
      log.warn({ err: String((err as Error)?.message ?? err), attempt, what }, "waiting for NATS / JetStream to become available");
      await sleep(Math.min(2000, 250 * attempt));
    }
  }
}
