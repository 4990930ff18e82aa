import type { NextFunction, Request, Response } from "express";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";

/**
 * How deep a request body may nest. No request the gateway takes needs more than a
 * handful of levels; a body nested thousands deep overflows the stack of whatever walks it
 * recursively later (the A2A SDK's validation, JSON.stringify of a task), possibly after
 * the run has started, so the client sees an error for a task that ran and retries it.
 */
export const MAX_BODY_DEPTH = 64;

/** Whether a parsed JSON value nests deeper than `max` (objects and arrays are levels). Iterative: any depth is safe to check. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 1 }];
  while (stack.length > 0) {
    const { value: v, depth } = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (depth > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === "object") stack.push({ value: child, depth: depth + 1 });
    }
  }
  return false;
}

/**
 * Express middleware after the JSON parser: refuses a body nested deeper than `max`
 * before any handler sees it (400 BODY_TOO_DEEP; a JSON-RPC endpoint answers -32600, invalid request).
 */
export function limitBodyDepth(max = MAX_BODY_DEPTH) {
  return (req: Request, _res: Response, next: NextFunction): void => {
    if (nestsDeeperThan(req.body, max)) {
      next(
        new GatewayHttpError(400, GatewayErrorCode.BODY_TOO_DEEP, `the request body nests deeper than ${max} levels of objects and arrays: flatten it`, {
          data: { maxDepth: max },
        }),
      );
      return;
    }
    next();
  };
}
