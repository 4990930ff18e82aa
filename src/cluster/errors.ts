import { defineErrorCodes, KovaError } from "../core/index.js";

/** The cluster state's error codes (stable: they travel over NATS and scripts match on them). */
export const ClusterErrorCode = defineErrorCodes("cluster", {
  /** No Kova cluster of that name on this NATS (its buckets do not exist). */
  UNKNOWN_CLUSTER: "UNKNOWN_CLUSTER",
  /** A configured limit (actors per cluster) would be exceeded. */
  QUOTA_EXCEEDED: "QUOTA_EXCEEDED",
  /** Near `[cluster] max_actors`, the registry kept changing while an actor was admitted (retryable). */
  ADMISSION_CONFLICT: "ADMISSION_CONFLICT",
});

/** A spawn (or another request) would pass a configured quota. */
export class QuotaExceededError extends KovaError {
  constructor(
    readonly quota: string,
    readonly limit: number,
    readonly current: number,
    fix: string,
  ) {
    super(ClusterErrorCode.QUOTA_EXCEEDED, `${quota} is ${limit} and ${current} are in use: ${fix}`, { data: { quota, limit, current } });
  }
}

/**
 * A registry entry written under a fence (`Nats-Expected-Last-Sequence`) lost to another
 * write of the bucket: the count it was admitted on is stale (ActorAdmission retries).
 */
export class FenceConflictError extends KovaError {
  constructor(id: string, fence: number, options: { cause?: unknown } = {}) {
    super(ClusterErrorCode.ADMISSION_CONFLICT, `the agents bucket moved past revision ${fence} before ${id} was written: admit it again`, {
      retryable: true,
      data: { actorId: id, fence },
      ...options,
    });
  }
}
