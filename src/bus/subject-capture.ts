import { DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { Logger } from "../core/index.js";
import { isStreamNotFound, isSubjectOverlap } from "./nats-errors.js";

/** JetStream as a layer above uses it through the bus: `Bus` is one. */
export interface JetStreamAccess {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
}

const CAPTURE_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * Subjects stored on demand, for a message that must not be missed by an absent
 * subscriber (a workflow run waiting on a subject, docs/workflows.md): a subject some
 * stream already stores is read from that stream; any other is added to one capture
 * stream (`KOVA_<C>_WAITS`, limits retention, 7 days) and removed again when not needed.
 *
 * Changing a stream's subject list is read-modify-write with no compare-and-set in the
 * JetStream API: two processes adding subjects at once could each drop the other's. A
 * caller makes every `capture` and `release` under one lock (KvStore.locked).
 */
export class SubjectCapture {
  constructor(
    private readonly nats: JetStreamAccess,
    /** The capture stream's name (Subjects.streams.waits). */
    private readonly stream: string,
    private readonly replicas = 1,
  ) {}

  /** The stream storing `subject` (adding it to the capture stream if none does) and the sequence its next message gets. */
  async capture(subject: string): Promise<{ stream: string; startSeq: number }> {
    const { jsm } = this.nats;
    for (let attempt = 0; ; attempt++) {
      const names: string[] = [];
      for await (const n of jsm.streams.names(subject)) names.push(...(Array.isArray(n) ? n : [n]));
      const holder = names.find((n) => n === this.stream) ?? names[0];
      if (holder !== undefined) {
        const info = await jsm.streams.info(holder);
        return { stream: holder, startSeq: info.state.last_seq + 1 };
      }
      try {
        const info = await this.info();
        if (info) {
          await jsm.streams.update(this.stream, { ...info.config, subjects: [...(info.config.subjects ?? []), subject] });
          return { stream: this.stream, startSeq: info.state.last_seq + 1 };
        }
        await jsm.streams.add({
          name: this.stream,
          subjects: [subject],
          retention: RetentionPolicy.Limits,
          storage: StorageType.File,
          num_replicas: this.replicas,
          max_age: nanos(CAPTURE_MAX_AGE_MS),
          discard: DiscardPolicy.Old,
        });
        return { stream: this.stream, startSeq: 1 };
      } catch (err) {
        // Another stream began storing the subject meanwhile: read it from there.
        if (!isSubjectOverlap(err) || attempt > 2) throw err;
      }
    }
  }

  /** Stops capturing `subject` (the capture stream goes with its last subject). */
  async release(subject: string): Promise<void> {
    const info = await this.info();
    const subjects = info?.config.subjects ?? [];
    if (!info || !subjects.includes(subject)) return;
    const rest = subjects.filter((s) => s !== subject);
    if (rest.length === 0) await this.nats.jsm.streams.delete(this.stream);
    else await this.nats.jsm.streams.update(this.stream, { ...info.config, subjects: rest });
  }

  private info() {
    return this.nats.jsm.streams.info(this.stream).catch((err: unknown) => {
      if (isStreamNotFound(err)) return undefined;
      throw err;
    });
  }

  /**
   * Reads the first message of `subject` in `stream` at or after `startSeq` with an ordered
   * consumer (server memory only while it reads), hands it to `take` once, and stops. A
   * failure is logged and the read tried again a second later, until `stop`.
   */
  readFirst(at: { stream: string; subject: string; startSeq: number }, take: (data: Uint8Array, seq: number) => Promise<void>, log: Logger): { stop(): void } {
    let stopped = false;
    let messages: { stop(): void } | undefined;
    void (async () => {
      while (!stopped) {
        try {
          const consumer = await this.nats.js.consumers.get(at.stream, {
            filter_subjects: at.subject,
            deliver_policy: DeliverPolicy.StartSequence,
            opt_start_seq: at.startSeq,
          });
          const iter = await consumer.consume({ max_messages: 1 });
          messages = iter;
          if (stopped) iter.stop();
          for await (const m of iter) {
            await take(m.data, m.seq);
            iter.stop();
            // Taken: the reader stays stopped so the same message is not handed over again.
            stopped = true;
          }
        } catch (err) {
          if (stopped) return;
          log.warn({ err, subject: at.subject }, "could not read a captured subject; retrying");
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    })();
    return {
      stop: () => {
        stopped = true;
        messages?.stop();
      },
    };
  }
}
