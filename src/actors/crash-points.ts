/**
 * Test-only crash hooks: `KOVA_TEST_CRASH_AT=<point>` (or `<point>@<actorId>`) makes the
 * process SIGKILL itself when a turn reaches that point, so an e2e test can stop a node
 * exactly inside a crash window (test/e2e/actors-turn-crash.test.ts). Read once at load:
 * unset, a crash point costs one comparison.
 */
export type CrashPoint =
  /** A send's publish was acknowledged by JetStream; its step is not recorded yet. */
  | "after-publish-ack"
  /** The handler returned (an unrecorded last step ran); the turn's checkpoint is not saved yet. */
  | "before-checkpoint"
  /** A split checkpoint's stored window is written on NATS; the checkpoint that names it is not (docs/actors.md, "Dedupe windows"). */
  | "after-window"
  /** The turn's checkpoint is saved on NATS; its reply, journal close and WAL completion are not done. */
  | "after-checkpoint"
  /** The reply was published; the WAL record is still PENDING. */
  | "after-reply"
  /** The WAL record is complete; the message is not acknowledged yet. */
  | "after-wal-complete";

const spec = process.env.KOVA_TEST_CRASH_AT;

export function crashPoint(point: CrashPoint, actorId: string): void {
  if (spec === undefined) return;
  if (spec === point || spec === `${point}@${actorId}`) process.kill(process.pid, "SIGKILL");
}
