import { defineErrorCodes, KovaError } from "../core/index.js";

/** The testing layer's error codes (stable: they travel over NATS and scripts match on them). */
export const HarnessErrorCode = defineErrorCodes("testing", {
  HARNESS: "HARNESS",
});

/** The harness could not give a test what it asked for (no nats-server, no healthy start). */
export class HarnessError extends KovaError {
  constructor(message: string, cause?: unknown) {
    super(HarnessErrorCode.HARNESS, message, { cause });
  }
}
