import { ErrorCode, KovaError, recordFormat, type Logger, componentLogger } from "../../core/index.js";
import { createEnvelope, KvStore, type Bus, type NatsConnection } from "../../bus/index.js";
import { KvMirror } from "../../cluster/index.js";
import { dueTick, nextTick, scheduledRunId, scheduleTarget, type ScheduleSpec } from "./spec.js";
import { startMessageId, WORKFLOW_ACTOR_TYPE, WorkflowMessageType } from "../../workflow/index.js";

/** Version 2: the spec may start a workflow (`spec.workflow`); a message schedule is still written as 1, which older nodes read. */
export const SCHEDULE_RECORD_VERSION = 2;
const READABLE: readonly number[] = [1, 2];

/** The oldest version that holds `spec`: an older node refuses (and skips) only what it could not fire. */
function recordVersion(spec: ScheduleSpec): number {
  return spec.workflow ? 2 : 1;
}

/** A schedule as stored in KV `kova_<c>_schedules`: its spec and the last tick handled. */
export interface ScheduleRecord {
  v?: number;
  spec: ScheduleSpec;
  /** Ticks of interval schedules are `anchor + k × every`; cron ignores it. */
  anchor: number;
  /** Scheduled time (epoch ms) of the last tick handled, fired or skipped. */
  lastTick: number;
  /** `config` (kova.toml, re-applied at every node start) or `api` (kova schedules add). */
  source: "config" | "api";
  updatedAt: number;
  /** A tick a node claimed and has not confirmed sending yet (it may have died in between). */
  pending?: { tick: number; node: string; at: number; missed: number };
}

export interface ScheduleView extends ScheduleRecord {
  /** The next fire times, for `kova schedules ls`. */
  next: number[];
}

export const SCHEDULE_RECORD_FORMAT = recordFormat<ScheduleRecord>({
  describe: (id) => `schedule ${id}`,
  version: SCHEDULE_RECORD_VERSION,
  readable: READABLE,
});

export interface ScheduleServiceOptions {
  nc: NatsConnection;
  bus: Bus;
  cluster: string;
  replicas?: number;
  logger: Logger;
  /** How often due ticks are looked for (default 250 ms). */
  checkMs?: number;
  /** This node's id, recorded with a claim. */
  nodeId: string;
  /** How long a claim may stay unconfirmed before another node sends for it (default 5 s). */
  reclaimMs?: number;
  /**
   * Declares an actor the way the `spawn` endpoint does (quota included): a workflow
   * schedule declares each tick's run before sending it `workflow.start`. Without it a
   * workflow schedule's ticks fail (and are retried).
   */
  spawn?: (req: { id: string; type: string }) => Promise<unknown>;
  /** Told after each fired tick (for events); `missed` > 0 for a run_once catch-up; `runId` for a workflow schedule. */
  onFired?: (e: { id: string; tick: number; to: string; missed: number; runId?: string }) => void;
  /** Told when missed ticks were let pass (catch_up = "skip"). */
  onSkipped?: (e: { id: string; tick: number; missed: number }) => void;
}

/**
 * Fires schedules exactly once per tick across the cluster. Every node runs one. For a due
 * tick a node first claims it: a compare-and-set that moves `lastTick` to the tick and
 * records the claim as `pending`; only the winner sends, under the message id
 * `sched-<id>-<tick>`, then clears `pending`. A claimer that dies between claim and clear
 * leaves `pending` behind; after `reclaimMs` another node sends the same message again
 * (the A2A stream's duplicate window stores it once) and clears it. So three nodes never
 * fire a tick three times, and a node killed mid-tick loses no tick. A pass that comes
 * late (a node stalled by load) still fires each tick within the grace on its own; only
 * ticks that no running scheduler could have watched count as missed (see dueTick).
 */
export class ScheduleService {
  private timer: NodeJS.Timeout | undefined;
  /** Schedules a pass is working on. */
  private readonly busy = new Set<string>();
  /** Ticks that fell due before this were not watched by this node (see dueTick). */
  private readonly watchedSince = Date.now();
  private readonly log: Logger;

  private constructor(
    private readonly opts: ScheduleServiceOptions,
    readonly store: KvStore<ScheduleRecord>,
    private readonly mirror: KvMirror<ScheduleRecord>,
  ) {
    this.log = componentLogger(opts.logger, "schedules");
  }

  static async start(opts: ScheduleServiceOptions): Promise<ScheduleService> {
    const store = await KvStore.open(opts.nc, opts.cluster, "schedules", SCHEDULE_RECORD_FORMAT, { replicas: opts.replicas });
    const mirror = await KvMirror.start(store, componentLogger(opts.logger, "schedules"), { nc: opts.nc });
    const svc = new ScheduleService(opts, store, mirror);
    svc.timer = setInterval(() => void svc.check(), opts.checkMs ?? 250);
    svc.timer.unref();
    return svc;
  }

  /**
   * Creates or updates a schedule. An update keeps `lastTick` (a restart with the same
   * kova.toml does not re-fire anything); a new one starts counting now.
   */
  async upsert(spec: ScheduleSpec, source: ScheduleRecord["source"]): Promise<{ created: boolean }> {
    let created = false;
    await this.store.change(spec.id, (cur) => {
      const now = Date.now();
      created = cur === undefined;
      if (!cur) return { v: recordVersion(spec), spec, anchor: now, lastTick: now, source, updatedAt: now };
      if (JSON.stringify(cur.value.spec) === JSON.stringify(spec) && cur.value.source === source) return undefined;
      return { ...cur.value, v: recordVersion(spec), spec, source, updatedAt: now };
    });
    return { created };
  }

  /** @returns whether there was a schedule to remove */
  async remove(id: string): Promise<boolean> {
    if (!(await this.store.get(id))) return false;
    await this.store.delete(id);
    return true;
  }

  list(now = Date.now(), count = 3): ScheduleView[] {
    const out: ScheduleView[] = [];
    for (const [, e] of this.mirror.entries()) {
      const next: number[] = [];
      let t = Math.max(e.value.lastTick, now);
      for (let i = 0; i < count; i++) next.push((t = nextTick(e.value.spec, t, e.value.anchor)));
      out.push({ ...e.value, next });
    }
    return out.sort((a, b) => a.spec.id.localeCompare(b.spec.id));
  }

  /**
   * One pass over every schedule: fire what is due. Schedules are worked on independently,
   * so one whose send is slow does not hold back the others' ticks; a schedule still being
   * worked on from an earlier pass is left to it.
   */
  async check(now = Date.now()): Promise<void> {
    const work: Promise<void>[] = [];
    for (const [id] of [...this.mirror.entries()]) {
      if (this.busy.has(id)) continue;
      this.busy.add(id);
      work.push(
        this.advance(id, now)
          .catch((err: unknown) => this.log.warn({ err, schedule: id }, "schedule tick failed; retrying on the next pass"))
          .finally(() => this.busy.delete(id)),
      );
    }
    await Promise.all(work);
  }

  /** Handles every tick of one schedule that is due by `now`, oldest first. */
  private async advance(id: string, now: number): Promise<void> {
    const grace = Math.max(5_000, 3 * (this.opts.checkMs ?? 250));
    const reclaimMs = this.opts.reclaimMs ?? 5_000;
    // Bounded: a pass ends even if ticks keep falling due; the next pass goes on.
    for (let step = 0; step < 100; step++) {
      const e = this.mirror.get(id);
      if (!e) return;
      const rec = e.value;
      if (rec.pending) {
        if (rec.pending.at + reclaimMs <= now) await this.send(id, rec, e.revision, rec.pending, "reclaimed");
        return;
      }
      const due = dueTick(rec.spec, rec.lastTick, rec.anchor, now, grace, this.watchedSince);
      if (!due || !(await this.claim(id, rec, e.revision, due))) return;
    }
  }

  /** Claims a due tick (compare-and-set); the winner sends. @returns false when another node claimed it first */
  private async claim(id: string, rec: ScheduleRecord, revision: number, due: { tick: number; fire: boolean; missed: number }): Promise<boolean> {
    const pending = due.fire ? { tick: due.tick, node: this.opts.nodeId, at: Date.now(), missed: due.missed } : undefined;
    const claimed: ScheduleRecord = { ...rec, lastTick: due.tick, updatedAt: Date.now(), ...(pending ? { pending } : {}) };
    if (!pending) delete claimed.pending;
    const rev = await this.cas(id, claimed, revision);
    if (rev === undefined) return false;
    if (!pending) {
      this.log.warn(
        { schedule: id, missed: due.missed },
        'schedule skipped ticks missed while no node ran or this one was stalled past the grace (catch_up = "skip")',
      );
      this.opts.onSkipped?.({ id, tick: due.tick, missed: due.missed });
      return true;
    }
    return this.send(id, claimed, rev, pending, "claimed");
  }

  /** Sends the message of a claimed tick, then clears the claim. */
  private async send(
    id: string,
    rec: ScheduleRecord,
    revision: number,
    p: NonNullable<ScheduleRecord["pending"]>,
    how: "claimed" | "reclaimed",
  ): Promise<boolean> {
    const { spec } = rec;
    const runId = spec.workflow ? await this.startRun(id, spec, p.tick) : undefined;
    if (!spec.workflow) {
      await this.opts.bus.send(
        createEnvelope({ id: `sched-${id}-${p.tick}`, from: "kova-scheduler", to: spec.to!, type: spec.type!, payload: spec.payload ?? null }),
      );
    }
    const done: ScheduleRecord = { ...rec, updatedAt: Date.now() };
    delete done.pending;
    if ((await this.cas(id, done, revision)) === undefined) return false;
    const to = scheduleTarget(spec);
    this.log.info({ schedule: id, tick: new Date(p.tick).toISOString(), to, runId, missed: p.missed, how }, "schedule fired");
    this.opts.onFired?.({ id, tick: p.tick, to, missed: p.missed, ...(runId ? { runId } : {}) });
    return true;
  }

  /**
   * Starts the tick's workflow run as `kova workflow run` does: declare the run's actor,
   * then send it `workflow.start`. The run id and the message id are derived from the tick,
   * so sending the tick again (a reclaimed claim) starts nothing new: the declaration finds
   * the run, the A2A stream's duplicate window drops the second start, and a run that
   * already started ignores another.
   */
  private async startRun(id: string, spec: ScheduleSpec, tick: number): Promise<string> {
    const runId = scheduledRunId(id, tick);
    const wf = spec.workflow!;
    const spawn = this.opts.spawn;
    if (!spawn) throw new KovaError(ErrorCode.INTERNAL, `schedule ${id} starts workflow runs, but this scheduler was given no spawn`);
    await spawn({ id: runId, type: WORKFLOW_ACTOR_TYPE });
    await this.opts.bus.send(
      createEnvelope({
        id: startMessageId(runId),
        from: "kova-scheduler",
        to: runId,
        type: WorkflowMessageType.start,
        payload: { workflow: wf.definition, input: wf.input, sessionId: runId },
      }),
    );
    return runId;
  }

  /** Writes `rec` if the schedule is still at `revision`; undefined when another node changed it first. */
  private async cas(id: string, rec: ScheduleRecord, revision: number): Promise<number | undefined> {
    const rev = await this.store.update(id, { ...rec, v: recordVersion(rec.spec) }, revision);
    if (rev !== undefined) this.mirror.note(id, rec, rev);
    return rev;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.mirror.stop();
  }
}
