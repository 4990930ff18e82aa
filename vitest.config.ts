import { defineConfig } from "vitest/config";

/**
 * Three tiers, each a vitest project (docs/architecture.md, "Tests in tiers"):
 * - unit: pure logic, no build and no server (`npm run test:unit`, well under a minute);
 * - integration: one test process against real nats-server, LMDB, PostgreSQL, MCP servers,
 *   a browser (`npm run test:integration`, which builds first: actor modules that nodes
 *   load from config import `dist/`);
 * - e2e: spawned node processes from `dist/`, SIGKILL and restarts (`npm run test:e2e`,
 *   which builds first).
 * `npm test` builds and runs all three.
 */
export default defineConfig({
  test: {
    // Four test files at a time, whatever the core count: an integration or e2e file spends
    // most of its time waiting (for servers to start, leases to pass, processes to die), so
    // two files at a time left two cores 74% idle (a 620 s suite on this 2-core machine, 451 s
    // with four, every file green). More would start too many nats-servers and node
    // processes at once on two cores. `KOVA_TEST_WORKERS` sets another number (the
    // `--maxWorkers` flag does not reach the projects below, which take it from here).
    maxWorkers: Number(process.env.KOVA_TEST_WORKERS ?? 4),
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    projects: [
      // Unit files share one module graph per worker (isolate: false): importing src/ once
      // instead of per file takes the tier from 97 s to 32 s at load 21 beside two busy loops.
      // So a unit test must not depend on a fresh module state; the layers' registries accept
      // the same registration twice, and no unit test leaves a global changed.
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts"], isolate: false } },
      // Bounds for tests that start servers and processes: a wait that ends early costs
      // nothing, so they are sized for a loaded machine (processes start 10× slower at load 30).
      { extends: true, test: { name: "integration", include: ["test/integration/**/*.test.ts"], testTimeout: 60_000 } },
      { extends: true, test: { name: "e2e", include: ["test/e2e/**/*.test.ts"], testTimeout: 120_000, hookTimeout: 180_000 } },
    ],
  },
});
