import { defineErrorCodes } from "../core/index.js";
import { ClusterErrorCode } from "../cluster/index.js";

/**
 * The node layer's error codes (stable: they travel over NATS and scripts match on them),
 * with the cluster state's, which a node's requests also answer with.
 */
export const NodeErrorCode = Object.freeze({
  ...ClusterErrorCode,
  ...defineErrorCodes("node", {
    NATS_LAUNCH_FAILED: "NATS_LAUNCH_FAILED",
  }),
});
