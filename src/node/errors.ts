import { defineErrorCodes } from "../core/errors.js";

/** The node layer's error codes (stable: they travel over NATS and scripts match on them). */
export const NodeErrorCode = defineErrorCodes("node", {
  NATS_LAUNCH_FAILED: "NATS_LAUNCH_FAILED",
  /** No Kova cluster of that name on this NATS (its buckets do not exist). */
  UNKNOWN_CLUSTER: "UNKNOWN_CLUSTER",
});
