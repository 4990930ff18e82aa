import { defineErrorCodes, KovaError } from "../core/errors.js";

/** The node layer's error codes (stable: they travel over NATS and scripts match on them). */
export const NodeErrorCode = defineErrorCodes("node", {
  NATS_LAUNCH_FAILED: "NATS_LAUNCH_FAILED",
  /** No Kova cluster of that name on this NATS (its buckets do not exist). */
  UNKNOWN_CLUSTER: "UNKNOWN_CLUSTER",
  /** A configured limit (actors per cluster) would be exceeded. */
  QUOTA_EXCEEDED: "QUOTA_EXCEEDED",
});

/** A spawn (or another request) would pass a configured quota. */
export class QuotaExceededError extends KovaError {
  constructor(
    readonly quota: string,
    readonly limit: number,
    readonly current: number,
    fix: string,
  ) {
    super(NodeErrorCode.QUOTA_EXCEEDED, `${quota} is ${limit} and ${current} are in use: ${fix}`, { data: { quota, limit, current } });
  }
}
