/**
 * A bucket (or any resource) opened on first use and shared after: every caller awaits the
 * same opening, and a failed one is forgotten so the next caller tries again instead of
 * getting the old rejection forever. The node opens its workflow and approval buckets so.
 */
export function openOnce<T>(open: () => Promise<T>): () => Promise<T> {
  let opening: Promise<T> | undefined;
  return () => {
    opening ??= open().catch((err: unknown) => {
      opening = undefined;
      throw err;
    });
    return opening;
  };
}
