import { defineErrorCodes } from "../core/errors.js";

/** The testing layer's error codes (stable: they travel over NATS and scripts match on them). */
export const HarnessErrorCode = defineErrorCodes("testing", {
  HARNESS: "HARNESS",
});
