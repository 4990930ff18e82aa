import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dbConfigFrom } from "../../src/tools/builtin/db-config.js";
import { shellConfigFrom } from "../../src/tools/builtin/shell-config.js";
import { configError } from "../fixtures/config-error.js";
import { tempDir } from "../fixtures/disposable.js";

describe("[tools.shell] config", () => {
  it("shell config - defaults to the bwrap sandbox with bounded limits", () => {
    const c = shellConfigFrom(undefined, "tools.shell", { PATH: "/nonexistent" });
    expect(c).toMatchObject({
      sandbox: "bwrap",
      bwrapPath: "/usr/bin/bwrap",
      timeoutMs: 10_000,
      maxOutputBytes: 65_536,
      maxProcesses: 32,
      cgroup: "/sys/fs/cgroup/kova-shell",
      roBinds: [],
    });
    // Without a cgroup a call may use processes × memory_mb: 16 × 256 MiB = memory_total_mb.
    expect(c.memoryBytes).toBe(256 * 2 ** 20);
    expect(c.memoryTotalBytes).toBe(4096 * 2 ** 20);
    expect(c.workRoot).toBeUndefined();
  });

  it("shell config - reads snake_case keys into camelCase and resolves work_root against the config's directory", () => {
    const c = shellConfigFrom(
      {
        sandbox: "none",
        timeout_ms: 2000,
        max_output_bytes: 2048,
        memory_mb: 256,
        memory_total_mb: 512,
        max_processes: 8,
        cgroup: "/sys/fs/cgroup/delegated/kova/",
        max_file_mb: 2,
        tmp_size_mb: 4,
        work_size_mb: 5,
        work_root: "shell",
        ro_binds: ["/opt/tools/"],
      },
      "tools.shell",
      {},
      "/srv/kova",
    );
    expect(c).toMatchObject({
      sandbox: "none",
      timeoutMs: 2000,
      maxOutputBytes: 2048,
      memoryBytes: 256 * 2 ** 20,
      memoryTotalBytes: 512 * 2 ** 20,
      maxProcesses: 8,
      cgroup: "/sys/fs/cgroup/delegated/kova",
      maxFileBytes: 2 * 2 ** 20,
      tmpBytes: 4 * 2 ** 20,
      workBytes: 5 * 2 ** 20,
      workRoot: "/srv/kova/shell",
      roBinds: ["/opt/tools"],
    });
  });

  it("shell config - names the key as written in the file and the fix", () => {
    expect(configError(() => shellConfigFrom({ sandbox: "docker" }, "tools.shell")).message).toMatch(/^tools\.shell\.sandbox: must be "bwrap".*or "none"/);
    expect(configError(() => shellConfigFrom({ timeout_ms: 0 }, "tools.shell")).key).toBe("tools.shell.timeout_ms");
    expect(configError(() => shellConfigFrom({ timeout_ms: "10s" }, "tools.shell")).message).toContain("must be an integer from 100 to 3600000");
    expect(configError(() => shellConfigFrom({ ro_binds: ["/opt", "relative"] }, "tools.shell")).key).toBe("tools.shell.ro_binds[1]");
    expect(configError(() => shellConfigFrom({ ro_binds: ["/usr/lib", "/root/.ssh"] }, "tools.shell")).message).toMatch(
      /ro_binds\[1\]: .*never shown to the sandbox/,
    );
    expect(configError(() => shellConfigFrom({ work_root: "/etc" }, "tools.shell")).key).toBe("tools.shell.work_root");
    expect(configError(() => shellConfigFrom({ timeoutms: 5 }, "tools.shell")).message).toBe(
      "tools.shell.timeoutms: unknown key: did you mean tools.shell.timeout_ms?",
    );
    expect(configError(() => shellConfigFrom({ sandbox: "none", bwrap_path: "/usr/bin/bwrap" }, "tools.shell")).key).toBe("tools.shell.bwrap_path");
    expect(configError(() => shellConfigFrom({ memory_mb: 1024, memory_total_mb: 512 }, "tools.shell")).message).toBe(
      "tools.shell.memory_total_mb: is 512, less than memory_mb (1024), the limit of a single process: raise it or lower memory_mb",
    );
    expect(configError(() => shellConfigFrom({ cgroup: "/tmp/cg" }, "tools.shell")).message).toMatch(
      /^tools\.shell\.cgroup: must be "auto", "off" or a cgroup v2 directory under \/sys\/fs\/cgroup/,
    );
    expect(shellConfigFrom({ cgroup: "off" }, "tools.shell").cgroup).toBe("off");
  });

  it("shell config - a bind is judged by where it really leads: a symlink to /root, /etc or / is refused like the directory itself", async () => {
    await using dir = await tempDir("kova-bind-links-");
    const tools = join(dir.path, "tools-dir");
    mkdirSync(tools);
    for (const [name, target] of Object.entries({ root: "/root", etc: "/etc", slash: "/", tools })) symlinkSync(target, join(dir.path, name));
    // A link to an ordinary directory is bound at the place written.
    expect(shellConfigFrom({ ro_binds: [join(dir.path, "tools")] }, "tools.shell").roBinds).toEqual([join(dir.path, "tools")]);
    for (const [bind, real] of [
      ["root/.ssh", "/root/.ssh"],
      ["etc", "/etc"],
      ["slash", "/"],
      ["root/not-yet-created/sub", "/root/not-yet-created/sub"],
    ]) {
      const err = configError(() => shellConfigFrom({ ro_binds: ["/opt/tools", join(dir.path, bind!)] }, "tools.shell"));
      expect(err.key, bind).toBe("tools.shell.ro_binds[1]");
      expect(err.message, bind).toContain(`${join(dir.path, bind!)} leads through a symlink to ${real}, which may hold secrets`);
    }
    expect(configError(() => shellConfigFrom({ work_root: join(dir.path, "etc") }, "tools.shell")).message).toContain("(really /etc) is a system directory");
  });
});

describe("[tools.db] config", () => {
  const env = { KOVA_DB_URL: "postgres://reader:s3cret@db:5432/app" };

  it("db config - takes the URL from the environment variable url_env names, with defaults", () => {
    expect(dbConfigFrom({ url_env: "KOVA_DB_URL" }, "tools.db", env)).toEqual({
      url: env.KOVA_DB_URL,
      statementTimeoutMs: 5000,
      maxRows: 1000,
      poolSize: 2,
      connectTimeoutMs: 5000,
      allowPrivilegedLogin: false,
      allowSessionSignals: false,
      allowRoleReset: false,
      allowWritePrivileges: false,
    });
    const c = dbConfigFrom(
      {
        url_env: "KOVA_DB_URL",
        role: "kova_ro",
        statement_timeout_ms: 100,
        max_rows: 5,
        pool_size: 1,
        allow_privileged_login: true,
        allow_session_signals: true,
        allow_role_reset: true,
        allow_write_privileges: true,
      },
      "tools.db",
      env,
    );
    expect(c).toMatchObject({
      role: "kova_ro",
      statementTimeoutMs: 100,
      maxRows: 5,
      poolSize: 1,
      allowPrivilegedLogin: true,
      allowSessionSignals: true,
      allowRoleReset: true,
      allowWritePrivileges: true,
    });
  });

  it("db config - takes the URL from url_file", async () => {
    await using tmp = await tempDir("kova-dbcfg-");
    const dir = tmp.path;
    writeFileSync(join(dir, "url"), "postgresql://r@h/db\n");
    expect(dbConfigFrom({ url_file: join(dir, "url") }, "tools.db", {}).url).toBe("postgresql://r@h/db");
    expect(configError(() => dbConfigFrom({ url_file: join(dir, "missing") }, "tools.db", {})).message).toMatch(/^tools\.db\.url_file: cannot read .*ENOENT/);
  });

  it("db config - refuses a URL written in the file, a missing variable and a bad role, without quoting the secret", () => {
    const inline = configError(() => dbConfigFrom({ url: "postgres://u:pw@h/db" }, "tools.db", env));
    expect(inline.key).toBe("tools.db.url");
    expect(inline.message).toContain('url_env = "KOVA_DB_URL"');
    expect(inline.message).not.toContain("pw@");
    expect(configError(() => dbConfigFrom({}, "tools.db", env)).key).toBe("tools.db.url_env");
    expect(configError(() => dbConfigFrom({ url_env: "NOPE" }, "tools.db", env)).message).toBe(
      "tools.db.url_env: environment variable NOPE is not set: export NOPE=<value> before starting the node",
    );
    const notPg = configError(() => dbConfigFrom({ url_env: "X" }, "tools.db", { X: "mysql://u:topsecret@h/db" }));
    expect(notPg.key).toBe("tools.db.url_env");
    expect(notPg.message).not.toContain("topsecret");
    expect(configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", role: "ro; drop" }, "tools.db", env)).key).toBe("tools.db.role");
    expect(configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", max_rows: 0 }, "tools.db", env)).key).toBe("tools.db.max_rows");
    expect(configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", allow_privileged_login: "yes" }, "tools.db", env)).key).toBe(
      "tools.db.allow_privileged_login",
    );
    expect(configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", allow_role_reset: 1 }, "tools.db", env)).key).toBe("tools.db.allow_role_reset");
    const write = configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", allow_write_privileges: "no" }, "tools.db", env));
    expect(write.key).toBe("tools.db.allow_write_privileges");
    expect(write.message).toMatch(/^tools\.db\.allow_write_privileges: /);
    expect(configError(() => dbConfigFrom({ url_env: "KOVA_DB_URL", allow_writes: true }, "tools.db", env)).message).toContain("allow_write_privileges");
  });
});
