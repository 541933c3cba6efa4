import { AsyncLocalStorage } from "node:async_hooks";
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { AppError } from "@/server/errors";

/**
 * Password hashing with scrypt (memory-hard, node:crypto). Stored as
 * `scrypt$N$r$p$salt$hash` (salt and hash base64url) so parameters can be raised later
 * without invalidating existing hashes.
 */
const N = 1 << 15; // 32 MiB of memory per hash with r = 8
const R = 8;
const P = 1;
const KEY_LENGTH = 32;
const SALT_BYTES = 16;

// Bounds for parameters read back from storage: a tampered row must not be able to make
// verification allocate unbounded memory.
const MAX_N = 1 << 20;
const MAX_R = 32;
const MAX_P = 16;

/**
 * scrypt runs on libuv's thread pool (4 threads by default), which DNS lookups and file reads
 * share. A burst of sign-ins must not occupy all of it, so at most HASH_CONCURRENCY hashes run at
 * once; the rest wait here in FIFO order (they hold no thread while waiting).
 */
export const HASH_CONCURRENCY = 2;
let hashing = 0;
const waiting: Array<() => void> = [];

async function withHashSlot<T>(fn: () => Promise<T>): Promise<T> {
  if (hashing >= HASH_CONCURRENCY) await new Promise<void>((resolve) => waiting.push(resolve));
  else hashing++;
  try {
    return await fn();
  } finally {
    // Hand the slot straight to the next waiter (the count stays), or give it back.
    const next = waiting.shift();
    if (next) next();
    else hashing--;
  }
}

/**
 * At most HASH_QUEUE_LIMIT pieces of hashing work (a sign-in, a registration, a lone hash) are
 * admitted per process at once; beyond that BUSY at once, before anything is counted or written,
 * so a flood cannot queue minutes of scrypt. Work admitted once (sign-in around its limits and
 * password check) hashes inside its admission without being counted twice.
 */
export const HASH_QUEUE_LIMIT = 32;

export class BusyError extends AppError {
  readonly retryAfterSeconds = 1;
  constructor() {
    super("busy", "busy: too many sign-ins and registrations are being checked right now; try again in a few seconds");
  }
}

let admitted = 0;
const admission = new AsyncLocalStorage<true>();

export async function withHashAdmission<T>(fn: () => Promise<T>): Promise<T> {
  if (admission.getStore()) return fn();
  if (admitted >= HASH_QUEUE_LIMIT) throw new BusyError();
  admitted++;
  try {
    return await admission.run(true, fn);
  } finally {
    admitted--;
  }
}

/** Hashes running or waiting, and work admitted, right now (for tests and metrics). */
export function hashLoad(): { running: number; waiting: number; admitted: number } {
  return { running: hashing, waiting: waiting.length, admitted };
}

function derive(password: string, salt: Buffer, n: number, r: number, p: number, keyLength: number): Promise<Buffer> {
  return withHashAdmission(() =>
    withHashSlot(
      () =>
        new Promise<Buffer>((resolve, reject) => {
          scrypt(password.normalize("NFKC"), salt, keyLength, { N: n, r, p, maxmem: 256 * n * r + 1024 * 1024 }, (err, key) =>
            err ? reject(err) : resolve(key),
          );
        }),
    ),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const key = await derive(password, salt, N, R, P, KEY_LENGTH);
  return ["scrypt", N, R, P, salt.toString("base64url"), key.toString("base64url")].join("$");
}

/** True when `password` matches `stored`; false for any malformed stored value. Constant time in the key comparison. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split("$");
  if (parts.length !== 6 || parts[0] !== "scrypt") return false;
  const [n, r, p] = parts.slice(1, 4).map(Number);
  if (![n, r, p].every(Number.isSafeInteger)) return false;
  if (n < 2 || n > MAX_N || (n & (n - 1)) !== 0 || r < 1 || r > MAX_R || p < 1 || p > MAX_P) return false;
  const salt = Buffer.from(parts[4], "base64url");
  const expected = Buffer.from(parts[5], "base64url");
  if (salt.length === 0 || expected.length < 16 || expected.length > 128) return false;
  const actual = await derive(password, salt, n, r, p, expected.length);
  return timingSafeEqual(actual, expected);
}

/** Whether a stored hash uses weaker parameters than the current ones (rehash on next sign-in). */
export function needsRehash(stored: string): boolean {
  const [scheme, n, r, p] = stored.split("$");
  return scheme !== "scrypt" || Number(n) < N || Number(r) < R || Number(p) < P;
}
