import { Command } from "commander";
import { describe, expect, it } from "vitest";
import { followsRunTree, register } from "../../src/cli/swarm-commands.js";

/** The `swarm run` command as `kova` builds it, with its flags parsed and its action not run. */
function swarmRunFlags(args: string[]): { follow?: boolean; json?: boolean } {
  const program = new Command("kova");
  register(program);
  const run = program.commands.find((c) => c.name() === "swarm")!.commands.find((c) => c.name() === "run")!;
  run.parseOptions(["a task", "--coordinator", "planner", ...args]);
  return run.opts<{ follow?: boolean; json?: boolean }>();
}

const terminal = { isTTY: true };
const pipe = {};

describe("kova swarm run: following the run tree", () => {
  it("cli - swarm run follows the run tree by default on a terminal, not when piped nor with --json; --follow and --no-follow decide either way", () => {
    expect(swarmRunFlags([]).follow).toBeUndefined();
    expect(followsRunTree(swarmRunFlags([]), terminal)).toBe(true);
    expect(followsRunTree(swarmRunFlags([]), pipe)).toBe(false);
    expect(followsRunTree(swarmRunFlags(["--json"]), terminal)).toBe(false);

    expect(followsRunTree(swarmRunFlags(["--no-follow"]), terminal)).toBe(false);
    expect(followsRunTree(swarmRunFlags(["--follow"]), pipe)).toBe(true);
    expect(followsRunTree(swarmRunFlags(["-f"]), pipe)).toBe(true);
    expect(followsRunTree(swarmRunFlags(["--follow", "--json"]), terminal)).toBe(true);
    // The last one given wins, as for every commander negatable flag.
    expect(followsRunTree(swarmRunFlags(["--follow", "--no-follow"]), terminal)).toBe(false);
  });

  it("cli - swarm run's help says that following is the default on a terminal and how to turn it off", () => {
    const program = new Command("kova");
    register(program);
    const run = program.commands.find((c) => c.name() === "swarm")!.commands.find((c) => c.name() === "run")!;
    // commander wraps the help to the terminal's width: compare it as one line
    const help = run.helpInformation().replace(/\s+/g, " ");
    expect(help).toContain("-f, --follow draw the run tree live");
    expect(help).toContain("the default when stdout is a terminal (without --json)");
    expect(help).toContain("--no-follow print only the answer, also on a terminal");
  });
});
