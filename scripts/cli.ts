/**
 * Operator CLI (failures exit non-zero with one line on stderr):
 *   user create --email E --password P [--admin]
 *   setup-code                                    prints the first account's setup code alone on stdout
 *                                                 (exit 1 once an account exists)
 *   invite create [--expires-in-days N]          prints the invite code alone on stdout
 *   token create --email E [--name N] [--expires-in-days N]   prints the token alone on stdout
 *   token list --email E                          one token per line: id, name, created, expires, last used
 *   token revoke --email E --id ID
 * Uses DATABASE_URL, or the embedded PostgreSQL that `npm start` runs when it is unset (its
 * port from FLOTILLA_EMBEDDED_PORT, its password from the data folder).
 */
import { parseArgs } from "node:util";
import { eq } from "drizzle-orm";
import { createInvite } from "../server/auth/invites";
import { currentSetupCode } from "../server/auth/setup-code";
import { createApiToken, listApiTokens, revokeApiToken } from "../server/auth/tokens";
import { createUser, findUserByEmail } from "../server/auth/users";
import { createDatabase, type Database } from "../server/db/client";
import { embeddedDatabaseUrl } from "../server/db/embedded-credentials";
import { users } from "../server/db/schema";
import { AppError } from "../server/errors";

const USAGE =
  "usage: cli user create --email E --password P [--admin] | cli setup-code | cli invite create [--expires-in-days N] | " +
  "cli token create --email E [--name N] [--expires-in-days N] | cli token list --email E | cli token revoke --email E --id ID";

const COMMANDS = new Set(["user create", "setup-code", "invite create", "token create", "token list", "token revoke"]);

class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

function describeDbError(err: unknown, url: string, fromEnv: boolean): string {
  // drizzle wraps driver errors ("Failed query: ...") with the real one as `cause`.
  const wrapped = err as { cause?: unknown };
  const e = (wrapped.cause && typeof wrapped.cause === "object" ? wrapped.cause : err) as { code?: string; message?: string };
  const where = (() => {
    try {
      const u = new URL(url);
      return `${u.hostname}:${u.port || 5432}${u.pathname}`;
    } catch {
      return "DATABASE_URL";
    }
  })();
  const hint = fromEnv
    ? "check DATABASE_URL"
    : "DATABASE_URL is not set and the embedded database of `npm start` is not running; start Flotilla with `npm start` or set DATABASE_URL";
  if (e.code === "ECONNREFUSED" || e.code === "ENOTFOUND" || e.code === "ETIMEDOUT" || e.code === "CONNECT_TIMEOUT")
    return `cannot connect to the database at ${where} (${e.code}); ${hint}`;
  if (e.code === "42P01") return `the database at ${where} has no Flotilla tables; run \`npm start\` once to apply migrations`;
  if (e.code === "3D000") return `database ${where} does not exist; ${hint}`;
  if (e.code === "28P01" || e.code === "28000") return `the database at ${where} rejected the credentials; ${hint}`;
  return `database error: ${oneLine(e.message ?? String(err))}`;
}

function parse(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      email: { type: "string" },
      password: { type: "string" },
      name: { type: "string" },
      id: { type: "string" },
      admin: { type: "boolean" },
      "expires-in-days": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  return { values, command: positionals.join(" ") };
}

function days(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) throw new CliError(`--expires-in-days must be a whole number of days; ${USAGE}`, 2);
  return n;
}

async function run(argv: string[]): Promise<string> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    throw new CliError(`${oneLine((err as Error).message)}; ${USAGE}`, 2);
  }
  const { values, command } = parsed;
  if (values.help) return USAGE;
  if (!COMMANDS.has(command)) throw new CliError(command ? `unknown command "${command}"; ${USAGE}` : USAGE, 2);
  if (command !== "invite create" && command !== "setup-code" && !values.email) throw new CliError(`--email is required; ${USAGE}`, 2);
  if (command === "user create" && values.password === undefined) throw new CliError(`--password is required; ${USAGE}`, 2);
  if (command === "token revoke" && !values.id) throw new CliError(`--id is required; ${USAGE}`, 2);
  const expiresInDays = days(values["expires-in-days"]);

  const fromEnv = Boolean(process.env.DATABASE_URL);
  const url = process.env.DATABASE_URL || embeddedDatabaseUrl();
  let database: Database | undefined;
  try {
    database = createDatabase(url, { max: 1, applicationName: "flotilla-cli" });
    const { db } = database;
    if (command === "user create") {
      const user = await createUser(db, { email: values.email ?? "", password: values.password ?? "" });
      if (values.admin && !user.isAdmin) await db.update(users).set({ isAdmin: true }).where(eq(users.id, user.id));
      return `created ${values.admin || user.isAdmin ? "admin" : "user"} ${user.email} (${user.id})`;
    }
    if (command === "setup-code") {
      const code = await currentSetupCode(db);
      if (!code) throw new CliError("an account exists already, so there is no setup code; add people with `cli user create` or an invite");
      return code;
    }
    if (command === "invite create") return (await createInvite(db, { expiresInDays })).code;
    const user = await findUserByEmail(db, values.email ?? "");
    if (!user) throw new CliError(`no user with email ${values.email}`);
    if (command === "token create") return await createApiToken(db, { userId: user.id, name: values.name, expiresInDays });
    if (command === "token revoke") {
      await revokeApiToken(db, { userId: user.id, tokenId: values.id ?? "" });
      return `revoked token ${values.id}`;
    }
    const tokens = await listApiTokens(db, { userId: user.id });
    return tokens
      .map((t) =>
        [t.id, t.name, `created ${t.created_at}`, t.expires_at ? `${t.expired ? "expired" : "expires"} ${t.expires_at}` : "no expiry", `last used ${t.last_used_at ?? "never"}`].join("\t"),
      )
      .join("\n");
  } catch (err) {
    if (err instanceof CliError) throw err;
    if (err instanceof AppError) throw new CliError(oneLine(err.message));
    throw new CliError(describeDbError(err, url, fromEnv));
  } finally {
    await database?.close().catch(() => {});
  }
}

run(process.argv.slice(2)).then(
  (out) => {
    if (out) process.stdout.write(`${out}\n`);
  },
  (err) => {
    const exitCode = err instanceof CliError ? err.exitCode : 1;
    process.stderr.write(`error: ${oneLine(err instanceof Error ? err.message : String(err))}\n`);
    process.exitCode = exitCode;
  },
);
