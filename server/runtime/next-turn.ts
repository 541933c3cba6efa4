/**
 * Lets the event loop run what is waiting (other requests, timers, I/O) before going on: long
 * CPU work that is allowed (compiling a submission's patterns, validating a large upload's lines)
 * is cut into pieces with it, so no one request holds the process.
 */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A nextTurn at most every `ms` of work: for loops over many small pieces. */
export function turnEvery(ms: number): () => Promise<void> {
  let since = performance.now();
  return async () => {
    if (performance.now() - since < ms) return;
    await nextTurn();
    since = performance.now();
  };
}
