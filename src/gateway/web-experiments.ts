import type { Express, Request, Response } from "express";
import type { Logger } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import { evalStore, isExperimentId, ownsExperiment, summarize, type StatusRecord } from "../eval/index.js";
import { mayUse, type Principal } from "./auth.js";
import { EXPERIMENTS_CSS, EXPERIMENTS_HTML, EXPERIMENTS_SCRIPT } from "./web-experiments-page.js";

/**
 * The web view's experiments page (docs/evals.md): `/ui/experiments` lists the cluster's
 * experiments and shows one — the table per subject and plots of score and cost per subject
 * and score per task — from two JSON endpoints that read KV `kova_<c>_evals`. The page's
 * script is a file of its own (`/ui/experiments.js`), so the page needs no inline script.
 *
 * Scoping, as for the rest of the view: an admin key sees every experiment, another key
 * those it owns whose agents it may use (mayViewExperiment); anything else is 404. The
 * gateway reads the bucket only (its role in deploy/nats/accounts.conf).
 */
export interface ExperimentsViewDeps {
  bus: Bus;
  log: Logger;
}

/**
 * Whether a key may see an experiment: an admin key (or anyone under `auth = "none"`) sees
 * all; any other key the experiments it owns (started for it: their ids carry its owner
 * scope, a prefix test as for everything a principal owns) that name only agents it may use.
 */
export function mayViewExperiment(p: Principal | undefined, s: Pick<StatusRecord, "experimentId" | "agents">): boolean {
  if (p === undefined) return false;
  if (p.admin) return true;
  return p.sessionScope !== undefined && ownsExperiment(s.experimentId, p.sessionScope) && (s.agents ?? []).every((a) => mayUse(p, a));
}

export function mountExperimentsView(app: Express, deps: ExperimentsViewDeps): void {
  // The view's headers (CSP, no framing, nosniff) are set for every /ui answer by the gateway (web.ts).
  const serve = (path: string, type: string, body: string) => app.get(path, (_req, res) => res.type(`${type}; charset=utf-8`).send(body));
  serve("/ui/experiments", "text/html", EXPERIMENTS_HTML);
  serve("/ui/experiments.js", "text/javascript", EXPERIMENTS_SCRIPT);
  serve("/ui/experiments.css", "text/css", EXPERIMENTS_CSS);
  app.get("/ui/api/experiments", (req, res, next) => {
    list(deps, req)
      .then((v) => res.json(v))
      .catch(next);
  });
  app.get("/ui/api/experiments/:id", (req, res, next) => {
    detail(deps, req, res).catch(next);
  });
}

async function list(deps: ExperimentsViewDeps, req: Request): Promise<{ cluster: string; at: number; experiments: StatusRecord[] }> {
  const statuses = await (await evalStore(deps.bus)).statuses();
  return { cluster: deps.bus.cluster, at: Date.now(), experiments: statuses.filter((s) => mayViewExperiment(req.principal, s)) };
}

async function detail(deps: ExperimentsViewDeps, req: Request, res: Response): Promise<void> {
  const id = String(req.params.id);
  const store = await evalStore(deps.bus);
  const status = isExperimentId(id) ? await store.getStatus(id) : undefined;
  const stored = status && mayViewExperiment(req.principal, status) ? await store.getSpec(id) : undefined;
  // Another key's experiment is as absent as one that never was.
  if (!status || !stored) {
    res.status(404).json({ error: { code: "EXPERIMENT_NOT_FOUND", message: `no experiment ${id}` } });
    return;
  }
  const records = await store.attempts(id);
  res.json({ report: summarize(id, stored.spec, records, status), status: status ?? null });
}
