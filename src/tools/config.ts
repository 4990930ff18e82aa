import { intValue, rejectUnknown, tableAt, type ConfigTable, componentLogger, silentLogger, type Logger } from "../core/index.js";
import { dbConfigFrom, type DbConfig } from "./builtin/db-config.js";
import { createDbTool } from "./builtin/db.js";
import { shellConfigFrom, type ShellConfig } from "./builtin/shell-config.js";
import { createShellTool } from "./builtin/shell.js";
import { createCalculatorTools } from "./builtin/calculator.js";
import { createClockTools } from "./builtin/clock-now.js";
import { createFileTools, fileConfigFrom, type FileToolConfig } from "./builtin/file.js";
import { createHttpTools, httpConfigFrom, type HttpToolConfig } from "./builtin/http.js";
import { createWebSearchTools, webSearchConfigFrom, type WebSearchConfig } from "./builtin/web-search.js";
import { DEFAULT_ARGUMENT_REPAIRS } from "./repair-budget.js";
import { DEFAULT_RESULT_MAX_BYTES } from "./result-cap.js";
import type { Tool } from "./types.js";

/**
 * The `[tools]` table of kova.toml. A built-in that touches the outside world is enabled by
 * its own table (an empty `[tools.http]` enables http_request with its defaults); clock_now
 * and calculator need no config and are always there. Registering a tool offers it to no
 * agent by itself: each agent's `tools` list picks what it may call.
 *
 * ```toml
 * [tools]
 * max_result_bytes = 16384      # cap of one tool result sent to the model
 * max_argument_repairs = 2      # invalid-argument calls a run may repair before it fails
 * [tools.file]                  # see builtin/file.ts
 * [tools.http]                  # see builtin/http.ts
 * [tools.web_search]            # see builtin/web-search.ts
 * [tools.shell]                 # see builtin/shell-config.ts (bubblewrap sandbox)
 * [tools.db]                    # see builtin/db-config.ts (PostgreSQL, read-only)
 * ```
 */
export interface ToolsConfig {
  maxResultBytes: number;
  maxArgumentRepairs: number;
  file?: FileToolConfig;
  http?: HttpToolConfig;
  webSearch?: WebSearchConfig;
  shell?: ShellConfig;
  db?: DbConfig;
}

const KEYS = ["max_result_bytes", "max_argument_repairs", "file", "http", "web_search", "shell", "db"];

/**
 * Parses `[tools]`.
 * @param raw the table as TOML gave it (undefined when absent)
 * @param keyPrefix its key as written (`tools`), for errors
 * @param baseDir where relative paths (the file root) are anchored: the config file's directory
 * @throws ConfigError naming the key and the fix
 */
export function toolsConfigFrom(raw: unknown, keyPrefix = "tools", env: NodeJS.ProcessEnv = process.env, baseDir = process.cwd()): ToolsConfig {
  const t: ConfigTable = raw === undefined ? {} : tableAt(raw, keyPrefix);
  rejectUnknown(t, KEYS, `${keyPrefix}.`);
  const sub = (name: string): ConfigTable | undefined => (t[name] === undefined ? undefined : tableAt(t[name], `${keyPrefix}.${name}`));
  const config: ToolsConfig = {
    maxResultBytes: intValue(t.max_result_bytes, `${keyPrefix}.max_result_bytes`, 1024, 16 * 1024 * 1024) ?? DEFAULT_RESULT_MAX_BYTES,
    maxArgumentRepairs: intValue(t.max_argument_repairs, `${keyPrefix}.max_argument_repairs`, 0, 20) ?? DEFAULT_ARGUMENT_REPAIRS,
  };
  const file = sub("file");
  if (file) config.file = fileConfigFrom(file, `${keyPrefix}.file`, env, baseDir);
  const http = sub("http");
  if (http) config.http = httpConfigFrom(http, `${keyPrefix}.http`, env);
  const webSearch = sub("web_search");
  if (webSearch) config.webSearch = webSearchConfigFrom(webSearch, `${keyPrefix}.web_search`, env);
  const shell = sub("shell");
  if (shell) config.shell = shellConfigFrom(shell, `${keyPrefix}.shell`, env, baseDir);
  const db = sub("db");
  if (db) config.db = dbConfigFrom(db, `${keyPrefix}.db`, env);
  return config;
}

/**
 * Builds every built-in tool the config enables, for `ToolRegistry.register`.
 * @param logger the node's logger; one line says which built-ins are on
 */
export function builtinTools(config: ToolsConfig, logger?: Logger): Tool[] {
  const tools: Tool[] = [...createClockTools(), ...createCalculatorTools()];
  if (config.file) tools.push(...createFileTools(config.file));
  if (config.http) tools.push(...createHttpTools(config.http));
  if (config.webSearch) tools.push(...createWebSearchTools(config.webSearch));
  const log = logger ?? silentLogger();
  if (config.shell) tools.push(createShellTool(config.shell, log));
  if (config.db) tools.push(createDbTool(config.db, log));
  logger && componentLogger(logger, "tools").info({ tools: tools.map((t) => t.name) }, "built-in tools enabled");
  return tools;
}
