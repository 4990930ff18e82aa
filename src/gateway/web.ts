import type { Express, NextFunction, Request, Response } from "express";
import { type Logger, ownsInstance } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import { mirrorNodes, type NodeRecord, type AgentRegistry, type KvMirror } from "../cluster/index.js";
import { mayUse } from "./auth.js";
import { sessionEvents } from "./web-session-events.js";
import { LOGIN_HTML, LOGIN_JS, WEB_VIEW_CSS, WEB_VIEW_HTML, WEB_VIEW_JS } from "./web-page.js";

/**
 * The web view: one page (`/ui`, no build step: HTML and a little JavaScript served from
 * here) over three JSON/SSE endpoints that read NATS directly, so any replica serves it.
 *
 * - `GET /ui/api/cluster`: nodes (state, heartbeat age, actors), agents (state, node,
 *   backlog from their mailbox consumer, usage from their `info_request`), DLQ counts. A
 *   key sees the agents it may use and its own instances; the backlog and usage of its own
 *   instances only (a shared agent's count every key's work); nodes and dead letters are
 *   an admin's.
 * - `GET /ui/api/sessions/<id>/events`: SSE of a session's events from its first one,
 *   then live; the page folds them into the run tree.
 */
export interface WebViewDeps {
  bus: Bus;
  registry: AgentRegistry;
  log: Logger;
}

/**
 * What every `/ui` response carries (answers with a key's data, and the 401 before one):
 * no script or style but the gateway's own files, no framing by any page (clickjacking:
 * `frame-ancestors 'none'`, and `X-Frame-Options` for browsers older than CSP 2), no
 * content-type sniffing, no referrer.
 */
export const WEB_VIEW_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

export function webViewHeaders(_req: Request, res: Response, next: NextFunction): void {
  res.setHeader("Content-Security-Policy", WEB_VIEW_CSP);
  res.setHeader("X-Frame-Options", "DENY");
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("Referrer-Policy", "no-referrer");
  next();
}

/** The web view's files that hold no cluster data: served without a key (the login page needs them). */
export const WEB_VIEW_STATIC = new Set(["/ui/login", "/ui/login.js", "/ui/app.js", "/ui/app.css"]);

/** Agents whose backlog and usage the cluster view asks for (the rest show the registry only). */
const DETAIL_LIMIT = 200;
/** How long the cluster view waits for one agent's backlog or usage. */
const DETAIL_MS = 1500;

function bounded<T>(p: Promise<T>, ms: number): Promise<T | null> {
  return Promise.race([p.catch(() => null), new Promise<null>((r) => setTimeout(() => r(null), ms).unref())]);
}

/** A node silent this long shows as not live (the page does not know each cluster's setting). */
const NODE_STALE_MS = 10_000;

/**
 * Mounts the page and its endpoints. The nodes bucket is read through a KV mirror (a watch,
 * opened on first use): listing its keys instead would chase heartbeats that land faster
 * than a loaded server lists them.
 * @returns stop, for the gateway's close
 */
export function mountWebView(app: Express, deps: WebViewDeps): { stop(): void } {
  let nodes: Promise<KvMirror<NodeRecord>> | undefined;
  const nodesMirror = () => {
    nodes ??= mirrorNodes(deps.bus.nc, deps.bus.cluster, deps.log);
    nodes.catch(() => (nodes = undefined));
    return nodes;
  };
  const serve = (path: string, type: string, body: string) =>
    app.get(path, (_req, res) => {
      res.setHeader("Content-Type", `${type}; charset=utf-8`);
      res.send(body);
    });
  serve("/ui", "text/html", WEB_VIEW_HTML);
  serve("/ui/login", "text/html", LOGIN_HTML);
  serve("/ui/app.js", "text/javascript", WEB_VIEW_JS);
  serve("/ui/login.js", "text/javascript", LOGIN_JS);
  serve("/ui/app.css", "text/css", WEB_VIEW_CSS);
  app.get("/ui/api/cluster", (req, res, next) => {
    clusterView(deps, req, nodesMirror)
      .then((v) => res.json(v))
      .catch(next);
  });
  app.get("/ui/api/sessions/:sessionId/events", (req, res, next) => {
    sessionEvents(deps, req, res).catch(next);
  });
  return {
    stop() {
      void nodes?.then((m) => m.stop()).catch(() => undefined);
    },
  };
}

async function clusterView(deps: WebViewDeps, req: Request, nodesMirror: () => Promise<KvMirror<NodeRecord>>) {
  const { bus, registry } = deps;
  const now = Date.now();
  const admin = req.principal?.admin === true;
  const scope = req.principal?.sessionScope;
  const nodes: Array<Record<string, unknown>> = [];
  const mirror = admin ? await bounded(nodesMirror(), DETAIL_MS) : null;
  for (const [, e] of [...(mirror?.entries() ?? [])].sort(([a], [b]) => a.localeCompare(b))) {
    const r = e.value;
    const age = Math.max(0, now - r.heartbeatAt);
    nodes.push({
      id: r.id,
      state: r.state,
      live: r.state !== "leaving" && age < NODE_STALE_MS,
      heartbeatAgeMs: age,
      actors: r.actors,
      version: r.version,
      host: r.host,
      startedAt: r.startedAt,
    });
  }
  const records = registry
    .list()
    .filter((r) => r.desired !== "killed" && mayUse(req.principal, r.id))
    .sort((a, b) => a.id.localeCompare(b.id));
  const agents = await Promise.all(
    records.map(async (r, i) => {
      const out: Record<string, unknown> = { id: r.id, type: r.type, state: r.state, node: r.node, desired: r.desired, capabilities: r.capabilities };
      if (i >= DETAIL_LIMIT || !(admin || (scope !== undefined && ownsInstance(r.id, scope)))) return out;
      // Each detail is bounded: a slow server shows a blank cell, not a stalled page.
      const [backlog, info] = await Promise.all([
        bounded(
          bus.jsm.consumers.info(bus.subjects.streams.a2a, bus.subjects.consumer(r.id)).then((c) => c.num_pending + c.num_ack_pending),
          DETAIL_MS,
        ),
        r.node ? bounded(bus.request<Record<string, unknown>>(r.id, "info_request", {}, { timeoutMs: 500 }), DETAIL_MS) : Promise.resolve(null),
      ]);
      out.backlog = backlog;
      if (info && typeof info === "object") {
        if (info.usage !== undefined) out.usage = info.usage;
        if (typeof info.model === "string") out.model = info.model;
      }
      return out;
    }),
  );
  const dlq: Record<string, number> = {};
  try {
    const info = admin ? await bounded(bus.jsm.streams.info(bus.subjects.streams.dlq, { subjects_filter: ">" }), DETAIL_MS) : null;
    for (const [subject, n] of Object.entries(info?.state.subjects ?? {})) dlq[subject.split(".").pop()!] = n;
  } catch (err) {
    deps.log.debug({ err }, "DLQ stream not readable");
  }
  return { cluster: bus.cluster, at: now, admin, nodes, agents, dlq };
}
