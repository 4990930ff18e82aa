import type { NatsConnection } from "@nats-io/transport-node";
import { isKovaError, KovaError } from "../core/index.js";
import { AGENT_RECORD_FORMAT, BusErrorCode, KvStore, isStreamNotFound, typedNatsError, type AgentRecord } from "../bus/index.js";
import { ClusterErrorCode } from "./errors.js";
import { NODE_RECORD_FORMAT, type NodeRecord } from "./membership.js";

/*
 * One-shot reads of the cluster's state from the server, for a process that keeps no
 * mirror (the CLI): what `nats kv get` / `nats kv ls` would show, each record read by its
 * format (a record a newer Kova wrote is refused, not misread). A cluster whose bucket does
 * not exist is UNKNOWN_CLUSTER; any other failure is typed (PERMISSION_DENIED, TIMEOUT).
 */

/** Every registered actor, by id. */
export async function readRegistry(nc: NatsConnection, cluster: string): Promise<AgentRecord[]> {
  const store = await KvStore.bind(nc, cluster, "agents", AGENT_RECORD_FORMAT);
  return byId(await reading(store, cluster, `reading KV bucket ${store.name}`, () => store.entries()));
}

/** Every node's last heartbeat, by id. */
export async function readNodes(nc: NatsConnection, cluster: string): Promise<NodeRecord[]> {
  const store = await KvStore.bind(nc, cluster, "nodes", NODE_RECORD_FORMAT);
  return byId(await reading(store, cluster, `reading KV bucket ${store.name}`, () => store.entries()));
}

/** @returns the actor's registry record, undefined when the cluster has no such actor */
export async function readAgent(nc: NatsConnection, cluster: string, id: string): Promise<AgentRecord | undefined> {
  const store = await KvStore.bind(nc, cluster, "agents", AGENT_RECORD_FORMAT);
  return (await reading(store, cluster, `reading agent ${id} from KV bucket ${store.name}`, () => store.get(id)))?.value;
}

function byId<T extends { id: string }>(entries: Map<string, { value: T }>): T[] {
  return [...entries.values()].map((e) => e.value).sort((a, b) => a.id.localeCompare(b.id));
}

async function reading<R>(store: KvStore<unknown>, cluster: string, what: string, read: () => Promise<R>): Promise<R> {
  try {
    return await read();
  } catch (err) {
    if (!isStreamNotFound(err) && !isKovaError(err, BusErrorCode.BUCKET_NOT_FOUND)) throw typedNatsError(err, what);
    throw new KovaError(
      ClusterErrorCode.UNKNOWN_CLUSTER,
      `no cluster "${cluster}" here (bucket ${store.name} missing): start a node with kova node start, or pass --cluster`,
      { cause: err, data: { cluster, bucket: store.name } },
    );
  }
}
