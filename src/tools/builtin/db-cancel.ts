import { connect } from "node:net";

/** Where a pooled pg connection went and the key its backend gave it at start-up. */
export interface CancelTarget {
  host: string;
  port: number;
  processID: number;
  secretKey: number;
}

/** PostgreSQL's CancelRequest code (frontend/backend protocol, "Canceling Requests in Progress"). */
const CANCEL_REQUEST_CODE = 80877102;

/**
 * The backend key of a connected `pg` client. node-postgres keeps it as `processID` and
 * `secretKey` (from BackendKeyData) and its own `Client.cancel` uses them, but the types do
 * not declare them; undefined when the client has none.
 */
export function cancelTarget(client: object): CancelTarget | undefined {
  const c = client as { host?: unknown; port?: unknown; processID?: unknown; secretKey?: unknown };
  if (typeof c.host !== "string" || typeof c.port !== "number" || typeof c.processID !== "number" || typeof c.secretKey !== "number") return undefined;
  return { host: c.host, port: c.port, processID: c.processID, secretKey: c.secretKey };
}

/**
 * Asks the server to cancel what a backend is running, the way psql's Ctrl-C does: a
 * 16-byte CancelRequest on a fresh socket, no login and no SQL. So it needs no EXECUTE on
 * pg_cancel_backend, which db_query's login is required not to have (db-login.ts). The
 * server answers nothing and closes the socket once it has signalled the backend, so the
 * promise resolves after the signal went out; it never rejects (a failed cancel leaves
 * statement_timeout to end the query) and resolves with the reason when it failed.
 */
export function sendCancelRequest(target: CancelTarget, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = target.host.startsWith("/") ? connect(`${target.host}/.s.PGSQL.${target.port}`) : connect(target.port, target.host);
    let failure: string | undefined;
    socket.setTimeout(timeoutMs, () => {
      failure = `no answer within ${timeoutMs} ms`;
      socket.destroy();
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      failure ??= err.code ?? err.message;
    });
    socket.on("close", () => resolve(failure));
    socket.on("connect", () => {
      const packet = Buffer.alloc(16);
      packet.writeInt32BE(16, 0);
      packet.writeInt32BE(CANCEL_REQUEST_CODE, 4);
      packet.writeInt32BE(target.processID, 8);
      // The key is a signed 32-bit value on the wire; pg stores what it read as such.
      packet.writeInt32BE(target.secretKey | 0, 12);
      socket.end(packet);
    });
    socket.resume();
  });
}
