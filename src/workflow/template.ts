import { TemplateError } from "./errors.js";

/**
 * Templates: `{{input.topic}}`, `{{steps.research.output}}`, `{{steps.research.output.title}}`,
 * `{{steps.research.metadata.usage}}`, `{{loop.iteration}}`. A template is text with
 * placeholders; each placeholder is a dotted path looked up in the run's data, never
 * evaluated as code. A missing path is an error that names the template and the path.
 */

/** One `{{ path }}` of a template. */
export interface Placeholder {
  /** The path as written, trimmed: `steps.research.output`. */
  path: string;
  segments: string[];
}

export type TemplatePart = string | Placeholder;

const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
const SEGMENT = /^[A-Za-z0-9_-]+$/;

/** Roots a path may start with. */
export const TEMPLATE_ROOTS = ["input", "steps", "loop", "run"] as const;

/**
 * Splits a template into literal text and placeholders.
 * @throws TemplateError for an empty or malformed path, or an unknown root
 */
export function parseTemplate(text: string, step?: string): TemplatePart[] {
  const parts: TemplatePart[] = [];
  let last = 0;
  for (const m of text.matchAll(PLACEHOLDER)) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    parts.push(parsePath(m[1]!, text, step));
    last = m.index + m[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  if (parts.some((p) => typeof p === "string" && (p.includes("{{") || p.includes("}}")))) {
    throw new TemplateError(text, "", "unbalanced {{ }}: write placeholders as {{input.name}} or {{steps.<id>.output}}", step);
  }
  return parts;
}

/**
 * A dotted path (`steps.research.output.title`).
 * @throws TemplateError naming the template
 */
export function parsePath(raw: string, template: string, step?: string): Placeholder {
  const path = raw.trim();
  const segments = path.split(".");
  if (path === "" || !segments.every((s) => SEGMENT.test(s))) {
    throw new TemplateError(template, path, "not a path: use dotted names such as input.topic or steps.research.output", step);
  }
  if (!(TEMPLATE_ROOTS as readonly string[]).includes(segments[0]!)) {
    throw new TemplateError(template, path, `unknown root ${segments[0]}: a path starts with ${TEMPLATE_ROOTS.join(", ")}`, step);
  }
  if (segments[0] === "steps" && (segments.length < 3 || !["output", "metadata", "status", "error"].includes(segments[2]!))) {
    throw new TemplateError(template, path, "a step reference reads steps.<id>.output, steps.<id>.metadata, steps.<id>.status or steps.<id>.error", step);
  }
  return { path, segments };
}

/** The step ids a template refers to (for validation at load). */
export function referencedSteps(parts: readonly TemplatePart[]): string[] {
  return parts.flatMap((p) => (typeof p !== "string" && p.segments[0] === "steps" ? [p.segments[1]!] : []));
}

/** Looks up a path; `undefined` result means "missing", with the reason. */
export type PathResolver = (segments: readonly string[]) => { value: unknown } | { missing: string };

/**
 * Walks `segments` into `value` (objects by key, arrays by index).
 * @returns the value, or why it is missing (naming the segment)
 */
export function walk(value: unknown, segments: readonly string[], prefix: string): { value: unknown } | { missing: string } {
  let cur = value;
  let at = prefix;
  for (const seg of segments) {
    if (Array.isArray(cur)) {
      const i = Number(seg);
      if (!Number.isInteger(i) || i < 0 || i >= cur.length) return { missing: `${at} has no element ${seg} (it has ${cur.length})` };
      cur = cur[i];
    } else if (typeof cur === "object" && cur !== null) {
      if (!Object.hasOwn(cur, seg)) {
        const keys = Object.keys(cur).slice(0, 10);
        return { missing: `${at} has no field ${seg}${keys.length ? ` (fields: ${keys.join(", ")})` : ""}` };
      }
      cur = (cur as Record<string, unknown>)[seg];
    } else {
      return { missing: `${at} is ${cur === null ? "null" : `a ${typeof cur}`}, it has no field ${seg}` };
    }
    at = `${at}.${seg}`;
  }
  return { value: cur };
}

/** A value as text in a rendered template: strings as they are, everything else as JSON. */
export function stringify(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  return JSON.stringify(value);
}

function resolve(part: Placeholder, template: string, resolver: PathResolver, step?: string): unknown {
  const r = resolver(part.segments);
  if ("missing" in r) throw new TemplateError(template, part.path, r.missing, step);
  return r.value;
}

/**
 * Renders a template to text.
 * @throws TemplateError naming the template and the missing path
 */
export function renderTemplate(template: string, resolver: PathResolver, step?: string): string {
  return parseTemplate(template, step)
    .map((p) => (typeof p === "string" ? p : stringify(resolve(p, template, resolver, step))))
    .join("");
}

/**
 * The value of a template: a template that is exactly one placeholder (`{{steps.a.output}}`)
 * yields the value itself (an object, a boolean), anything else the rendered text.
 * @throws TemplateError naming the template and the missing path
 */
export function templateValue(template: string, resolver: PathResolver, step?: string): unknown {
  const parts = parseTemplate(template, step);
  if (parts.length === 1 && typeof parts[0] !== "string") return resolve(parts[0]!, template, resolver, step);
  return renderTemplate(template, resolver, step);
}
