import { createHash, randomBytes } from "node:crypto";
import { KvStore, type NatsConnection } from "../bus/index.js";
import { isValidId, type Logger, recordFormat, ArgumentError, ErrorCode, KovaError } from "../core/index.js";
import { KvMirror } from "../cluster/index.js";
import type { ConfiguredKey } from "./config.js";

/**
 * API keys. A key is 32 random bytes (`kova_` + base64url); only its SHA-256 is stored,
 * in kova.toml (`[[gateway.keys]] hash`) or in the KV bucket `kova_<cluster>_gateway_keys`
 * (`kova gateway keys add`). A fast hash is right here: the key has 256 bits of entropy,
 * so there is nothing to brute-force, and a request pays one hash, not a KDF. Neither
 * the key nor its hash is ever logged or returned.
 */
export interface ApiKey {
  name: string;
  hash: string;
  /** Agents the key may use; undefined: every agent. */
  agents?: string[];
  ratePerMinute?: number;
  /**
   * An operator's key: it sees every principal's sessions, instances and agents in the web
   * view, `/v1/models` and the cards, and may use any instance. Never given by default.
   */
  admin?: boolean;
  /** This key's quotas; unset ones take `[gateway]`'s defaults (quotas.ts). */
  maxInstances?: number;
  maxConcurrentRuns?: number;
  tokensPerMinute?: number;
}

/**
 * A key's id: the principal it stands for (`key:<id>` owns its tasks, sessions and
 * instances). Derived from the key's hash, so it is stable for the key's life and new for
 * every new key: a key removed and added again under the same name is another principal
 * and sees nothing of the old one. It reveals nothing of the key (a hash of its hash).
 */
export function keyIdOf(hash: string): string {
  return createHash("sha256").update(hash, "utf8").digest("hex").slice(0, 20);
}

/** The principal id of a key. */
export function keyPrincipal(key: Pick<ApiKey, "hash">): string {
  return `key:${keyIdOf(key.hash)}`;
}

/** What the bucket holds per key name. */
export interface StoredKey extends ApiKey {
  v: number;
  createdAt: number;
}

export const STORED_KEY_VERSION = 1;

/** `sha256:<hex>` of a key. */
export function hashKey(key: string): string {
  return `sha256:${createHash("sha256").update(key, "utf8").digest("hex")}`;
}

export function isKeyHash(value: unknown): value is string {
  return typeof value === "string" && /^sha256:[0-9a-f]{64}$/.test(value);
}

/** A new random key, shown once to whoever creates it. */
export function generateKey(): string {
  return `kova_${randomBytes(32).toString("base64url")}`;
}

export const STORED_KEY_FORMAT = recordFormat<StoredKey>({
  describe: (name) => `gateway key ${name}`,
  version: STORED_KEY_VERSION,
  readable: [STORED_KEY_VERSION],
  read: (name, value) => {
    const k = value as StoredKey;
    if (!isKeyHash(k.hash))
      throw new KovaError(ErrorCode.INVALID_CONFIG, `gateway key ${name} has no valid hash: remove it and add it again (kova gateway keys rm / add)`, {
        data: { key: name },
      });
    return k;
  },
});

/**
 * The keys a gateway accepts: those of its config, and (unless `keys_bucket = false`)
 * those of the cluster's bucket, mirrored live so `kova gateway keys add` takes effect on
 * every replica within a watch round trip.
 */
export class KeyRing {
  private byHash = new Map<string, ApiKey>();
  private constructor(
    private readonly configured: ConfiguredKey[],
    private readonly mirror: KvMirror<StoredKey> | undefined,
  ) {
    this.rebuild();
    mirror?.onChange(() => this.rebuild());
  }

  /** @throws when the bucket cannot be opened (NATS permissions, JetStream down) */
  static async open(opts: { configured: ConfiguredKey[]; nc?: NatsConnection; cluster: string; replicas?: number; logger: Logger }): Promise<KeyRing> {
    if (!opts.nc) return new KeyRing(opts.configured, undefined);
    const store = await KvStore.open(opts.nc, opts.cluster, "gatewayKeys", STORED_KEY_FORMAT, { replicas: opts.replicas });
    const mirror = await KvMirror.start(store, opts.logger.child({ bucket: "gateway_keys" }), { nc: opts.nc });
    return new KeyRing(opts.configured, mirror);
  }

  private rebuild(): void {
    const next = new Map<string, ApiKey>();
    for (const [, e] of this.mirror?.entries() ?? []) next.set(e.value.hash, e.value);
    // Config wins over the bucket: the file is what an operator reviewed.
    for (const k of this.configured) next.set(k.hash, k);
    this.byHash = next;
  }

  /** The key a bearer token stands for, or undefined. */
  authenticate(token: string): ApiKey | undefined {
    if (token.length === 0 || token.length > 512) return undefined;
    return this.byHash.get(hashKey(token));
  }

  get size(): number {
    return this.byHash.size;
  }

  stop(): void {
    this.mirror?.stop();
  }
}

/** What `kova gateway keys add` may set on a key besides its name. */
export type KeyLimits = Pick<ApiKey, "agents" | "ratePerMinute" | "admin" | "maxInstances" | "maxConcurrentRuns" | "tokensPerMinute">;

/**
 * The bucket side of `kova gateway keys add|ls|rm`: the CLI writes, gateways watch.
 */
export class KeyAdmin {
  private constructor(private readonly store: KvStore<StoredKey>) {}

  static async open(nc: NatsConnection, cluster: string, replicas?: number): Promise<KeyAdmin> {
    return new KeyAdmin(await KvStore.open(nc, cluster, "gatewayKeys", STORED_KEY_FORMAT, { replicas }));
  }

  /**
   * Creates a key and stores its hash; returns the key itself (shown once, never stored).
   * @throws ArgumentError for a bad name or agent id, or a name already in use
   */
  async add(name: string, opts: KeyLimits = {}): Promise<{ key: string; record: StoredKey }> {
    if (!isValidId(name)) throw new ArgumentError("name", `${JSON.stringify(name)} is not a valid key name: use 1-128 characters of [A-Za-z0-9_-]`);
    for (const a of opts.agents ?? []) if (!isValidId(a)) throw new ArgumentError("--agents", `${JSON.stringify(a)} is not an agent id`);
    const key = generateKey();
    const record: StoredKey = { v: STORED_KEY_VERSION, name, hash: hashKey(key), createdAt: Date.now() };
    if (opts.agents && opts.agents.length > 0) record.agents = opts.agents;
    if (opts.ratePerMinute !== undefined) record.ratePerMinute = opts.ratePerMinute;
    if (opts.admin === true) record.admin = true;
    if (opts.maxInstances !== undefined) record.maxInstances = opts.maxInstances;
    if (opts.maxConcurrentRuns !== undefined) record.maxConcurrentRuns = opts.maxConcurrentRuns;
    if (opts.tokensPerMinute !== undefined) record.tokensPerMinute = opts.tokensPerMinute;
    if ((await this.store.create(name, record)) === undefined)
      throw new ArgumentError("name", `a key named ${name} exists: remove it first (kova gateway keys rm ${name}) or pick another name`);
    return { key, record };
  }

  /**
   * Key names with their limits (never their hashes).
   * @throws UnsupportedFormatError when a newer Kova stored a key (upgrade the CLI)
   */
  async list(): Promise<Array<Omit<StoredKey, "hash"> & { id: string }>> {
    const out: Array<Omit<StoredKey, "hash"> & { id: string }> = [];
    for (const e of (await this.store.entries()).values()) {
      const { hash, ...rest } = e.value;
      out.push({ ...rest, id: keyIdOf(hash) });
    }
    return out;
  }

  /** @returns false when no key had that name */
  async remove(name: string): Promise<boolean> {
    if (!(await this.store.get(name))) return false;
    await this.store.delete(name);
    return true;
  }
}
