import type { Msg, NatsConnection } from "@nats-io/transport-node";
import { ErrorCode, KovaError, fromWire } from "../core/index.js";
import { BusErrorCode, typedNatsError } from "./errors.js";
import { isNatsNoResponders, isNatsTimeout } from "./nats-errors.js";

const utf8 = new TextEncoder();

/**
 * One control request with a JSON body. A reply with an error header becomes the
 * remote error (same code); no responders means the node is not there.
 * @throws KovaError NO_RESPONDERS / TIMEOUT naming the subject, PERMISSION_DENIED when this user may not send it, RemoteError from the node
 */
export async function controlRequest<R>(nc: NatsConnection, subject: string, body: unknown, timeoutMs = 5000): Promise<R> {
  let msg: Msg;
  try {
    msg = await nc.request(subject, utf8.encode(JSON.stringify(body ?? {})), { timeout: timeoutMs });
  } catch (err) {
    if (isNatsNoResponders(err)) {
      throw new KovaError(BusErrorCode.NO_RESPONDERS, `no node answers on ${subject}: is the node running and in this cluster?`, { cause: err });
    }
    if (isNatsTimeout(err)) {
      throw new KovaError(ErrorCode.TIMEOUT, `no reply on ${subject} within ${timeoutMs} ms: the node may be overloaded or stopping`, {
        retryable: true,
        cause: err,
      });
    }
    throw typedNatsError(err, `request to ${subject}`);
  }
  const body2 = msg.data.length > 0 ? (JSON.parse(new TextDecoder().decode(msg.data)) as unknown) : null;
  if (msg.headers?.get("Nats-Service-Error-Code")) {
    throw fromWire(body2) ?? new KovaError(ErrorCode.REMOTE_ERROR, msg.headers.get("Nats-Service-Error") || `error from ${subject}`);
  }
  return body2 as R;
}
