import { ConfigError, INSTANCE_SEPARATOR, isValidId, isValidTemplateName, parseInstanceId, TEMPLATE_NAME_MAX } from "../core/index.js";

/** Default idle time before an instance is passivated (10 min). */
export const DEFAULT_IDLE_AFTER_MS = 600_000;

/**
 * An actor template (a "virtual actor" type): declared once, instantiated per key on the
 * first message to `kova.<c>.a2a.<name>--<key>`, passivated after `idleAfterMs` without a
 * turn and activated again by its next message, with its checkpointed state. Each
 * instance is an ordinary actor of `type` with its own state, mailbox, lease and
 * checkpoint; the template's `config` is shared by all of them.
 */
export interface ActorTemplate {
  /** The id prefix: an id token of at most 64 characters without `--`, not ending in `-`. */
  name: string;
  /** A registered actor type (defineActor) that every instance runs. */
  type: string;
  /** Read-only settings handed to every instance (ActorContext.template.config, initialState). */
  config?: Readonly<Record<string, unknown>>;
  /** An instance with no turn for this long is passivated (default 10 min; 0 never). */
  idleAfterMs?: number;
  /** Capabilities an instance advertises in the registry (default: the type's). */
  capabilities?: string[];
}

/** What an instance knows of its template: ActorContext.template and initialState's argument. */
export interface TemplateBinding {
  /** The template's name. */
  readonly name: string;
  /** This instance's key (the id after the first `--`). */
  readonly key: string;
  readonly config: Readonly<Record<string, unknown>>;
}

/** A template as registered: validated, defaults filled in, frozen. */
export interface RegisteredTemplate extends Required<Omit<ActorTemplate, "capabilities">> {
  capabilities?: string[];
}

/**
 * Checks a template before anything is registered or published.
 * @throws ConfigError naming the field (`<where>.name`, `.type`, `.idle_after`, `.config`) and the fix
 */
export function validateTemplate(t: ActorTemplate, where = "template"): RegisteredTemplate {
  if (!isValidTemplateName(t?.name)) {
    throw new ConfigError(
      `${where}.name`,
      `${JSON.stringify(t?.name)} is not a template name: use 1-${TEMPLATE_NAME_MAX} characters from [A-Za-z0-9_-], without "${INSTANCE_SEPARATOR}" (it separates the key in <name>${INSTANCE_SEPARATOR}<key>) and not ending in "-"`,
    );
  }
  if (!isValidId(t.type))
    throw new ConfigError(`${where}.type`, `${JSON.stringify(t.type)} is not an actor type: name a registered type, e.g. type = "counter"`);
  const idle = t.idleAfterMs ?? DEFAULT_IDLE_AFTER_MS;
  if (!Number.isInteger(idle) || idle < 0) {
    throw new ConfigError(`${where}.idle_after_ms`, `must be a whole number of milliseconds (0 = never passivate), not ${JSON.stringify(t.idleAfterMs)}`);
  }
  const config = t.config ?? {};
  if (typeof config !== "object" || config === null || Array.isArray(config)) {
    throw new ConfigError(`${where}.config`, 'must be a table of settings, e.g. config = { greeting = "hi" }');
  }
  try {
    JSON.stringify(config);
  } catch (err) {
    throw new ConfigError(`${where}.config`, `must be JSON-serializable (it is shown by status and passed to every instance): ${(err as Error).message}`, {
      cause: err,
    });
  }
  return Object.freeze({
    name: t.name,
    type: t.type,
    config: deepFreeze(structuredClone(config)),
    idleAfterMs: idle,
    ...(t.capabilities ? { capabilities: [...t.capabilities] } : {}),
  });
}

/**
 * The templates a node instantiates, by name. Every node of a cluster should register
 * the same templates (like actor types): the node that activates an instance and the
 * node that hosts it may differ. Registering can happen before or after the node starts;
 * an instance id whose template is unknown on every node follows the `unknown_agent` rule.
 */
export class ActorTemplateRegistry {
  readonly #templates = new Map<string, RegisteredTemplate>();

  constructor(templates: Iterable<ActorTemplate> = []) {
    for (const t of templates) this.register(t);
  }

  /**
   * Registers a template; registering an equal one again is a no-op.
   * @throws ConfigError for an invalid template or a different one under the same name
   */
  register(t: ActorTemplate, where = "template"): RegisteredTemplate {
    const valid = validateTemplate(t, where);
    const existing = this.#templates.get(valid.name);
    if (existing) {
      if (JSON.stringify(existing) === JSON.stringify(valid)) return existing;
      throw new ConfigError(
        `${where}.name`,
        `template ${JSON.stringify(valid.name)} is registered twice with different settings; give one of them another name`,
      );
    }
    this.#templates.set(valid.name, valid);
    return valid;
  }

  get(name: string): RegisteredTemplate | undefined {
    return this.#templates.get(name);
  }

  has(name: string): boolean {
    return this.#templates.has(name);
  }

  list(): RegisteredTemplate[] {
    return [...this.#templates.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The template and binding of an instance id, or undefined when no registered template matches it. */
  resolve(actorId: string): { template: RegisteredTemplate; binding: TemplateBinding } | undefined {
    const parsed = parseInstanceId(actorId);
    const template = parsed && this.#templates.get(parsed.template);
    if (!parsed || !template) return undefined;
    return { template, binding: Object.freeze({ name: template.name, key: parsed.key, config: template.config }) };
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
