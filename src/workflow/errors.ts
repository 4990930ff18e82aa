import { classifyErrorCodes, defineErrorCodes, KovaError, type KovaErrorOptions } from "../core/index.js";

/** The workflow layer's error codes (stable: they travel over NATS and scripts match on them). */
export const WorkflowErrorCode = defineErrorCodes("workflow", {
  /** A workflow definition that does not validate; the message names the step and the field. */
  WORKFLOW_INVALID: "WORKFLOW_INVALID",
  /** The run's input does not match the workflow's `input` declaration. */
  WORKFLOW_INPUT_INVALID: "WORKFLOW_INPUT_INVALID",
  /** A template or condition names a path that does not exist (or is malformed). */
  TEMPLATE_ERROR: "TEMPLATE_ERROR",
  /** An agent step's agent answered with a failure. */
  AGENT_STEP_FAILED: "AGENT_STEP_FAILED",
  /** An agent step got no result within its `timeout`. */
  STEP_TIMEOUT: "STEP_TIMEOUT",
  /** A wait step (approval or event) reached its `timeout`. */
  WAIT_TIMEOUT: "WAIT_TIMEOUT",
  /** A wait's subject, once its template is rendered, is not one a wait may capture. */
  WAIT_SUBJECT_INVALID: "WAIT_SUBJECT_INVALID",
  /** A `fail` step ran (e.g. `else = { fail = "not approved" }`). */
  WORKFLOW_FAILED: "WORKFLOW_FAILED",
  /** Some branches of a parallel step failed. */
  PARALLEL_FAILED: "PARALLEL_FAILED",
  /** The run was cancelled (`kova workflow cancel`). */
  WORKFLOW_CANCELLED: "WORKFLOW_CANCELLED",
  /** No run of that id in the cluster. */
  RUN_NOT_FOUND: "RUN_NOT_FOUND",
});
classifyErrorCodes({
  [WorkflowErrorCode.WORKFLOW_INVALID]: "bad_input",
  [WorkflowErrorCode.WORKFLOW_INPUT_INVALID]: "bad_input",
  [WorkflowErrorCode.RUN_NOT_FOUND]: "not_found",
});

/** Where a definition error sits: the workflow, the step (by id or index path) and the field. */
export interface DefinitionErrorLocation {
  workflow?: string;
  step?: string;
  field: string;
}

/** A workflow definition that does not validate, naming the step and field at fault. */
export class WorkflowDefinitionError extends KovaError {
  constructor(
    readonly location: DefinitionErrorLocation,
    message: string,
    options: KovaErrorOptions = {},
  ) {
    const where = [location.workflow ? `workflow ${location.workflow}` : undefined, location.step ? `step ${location.step}` : undefined]
      .filter(Boolean)
      .join(", ");
    super(WorkflowErrorCode.WORKFLOW_INVALID, `${where ? `${where}: ` : ""}${location.field}: ${message}`, {
      ...options,
      data: { ...location },
    });
  }
}

/** A template (or condition) that cannot be evaluated: names the template and the missing path. */
export class TemplateError extends KovaError {
  constructor(
    readonly template: string,
    readonly path: string,
    reason: string,
    readonly step?: string,
  ) {
    super(WorkflowErrorCode.TEMPLATE_ERROR, `${step ? `step ${step}: ` : ""}template ${JSON.stringify(template)}: ${path ? `${path}: ` : ""}${reason}`, {
      data: { template, path, ...(step ? { step } : {}) },
    });
  }
}

/** The run's input does not match the workflow's `input` declaration. */
export class WorkflowInputError extends KovaError {
  constructor(workflow: string, field: string, message: string) {
    super(WorkflowErrorCode.WORKFLOW_INPUT_INVALID, `workflow ${workflow}: input.${field}: ${message}`, { data: { workflow, field } });
  }
}
