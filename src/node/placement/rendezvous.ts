import { createHash } from "node:crypto";

/**
 * Rendezvous (highest-random-weight) hashing: an actor belongs to the live node with the
 * highest hash(actor, node). Every node computes this on its own from the membership it
 * sees, with no coordination, and when a node joins or leaves only the actors whose
 * winner changes move (about 1/N of them), which is what keeps rebalancing cheap.
 * Least-loaded placement would need a shared, consistent load view and moves more
 * actors on every change; see docs/cluster.md.
 */
export function rendezvousScore(actorId: string, nodeId: string): bigint {
  // 64 bits of SHA-256 spread well enough; collisions are broken by node id below.
  const digest = createHash("sha256").update(actorId).update("\u0000").update(nodeId).digest();
  return digest.readBigUInt64BE(0);
}

/** The node that should host `actorId` among `nodeIds`, or undefined when there are none. */
export function ownerOf(actorId: string, nodeIds: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestScore = -1n;
  for (const node of nodeIds) {
    const score = rendezvousScore(actorId, node);
    if (score > bestScore || (score === bestScore && best !== undefined && node < best)) {
      best = node;
      bestScore = score;
    }
  }
  return best;
}

/** Groups actors by their owner among `nodeIds` (actors with no owner are left out). */
export function assign(actorIds: Iterable<string>, nodeIds: readonly string[]): Map<string, string[]> {
  const out = new Map<string, string[]>(nodeIds.map((n) => [n, []]));
  for (const a of actorIds) {
    const owner = ownerOf(a, nodeIds);
    if (owner !== undefined) out.get(owner)?.push(a);
  }
  return out;
}
