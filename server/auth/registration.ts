import "server-only";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import type { Database } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { inviteIsOpen, markInviteUsedBy, redeemInvite } from "./invites";
import { limitRegistration } from "./limits";
import { hashPassword, withHashAdmission } from "./password";
import { setupCodeMatches } from "./setup-code";
import { anyUserExists, emailSchema, insertUser, passwordSchema, type UserRecord } from "./users";

/**
 * Self-service sign-up under `auth.registration`:
 * - `open`: anyone may register;
 * - `invite` (default): a valid, unused, unexpired invite code is needed;
 * - `closed`: only the CLI creates accounts.
 * The first account ever created becomes the admin; it needs the setup code (server/auth/
 * setup-code.ts) whatever the policy except closed, so a stranger who reaches a fresh deployment
 * first cannot take it. A code that is sent must be valid and is spent, whatever the policy (an
 * invite link works on an open deployment too; a setup code once an account exists is refused).
 */

export const registrationSchema = z
  .object({
    email: emailSchema,
    password: passwordSchema,
    invite_code: z.string({ error: "must be a string" }).trim().max(200, { error: "must be at most 200 characters" }).optional(),
    setup_code: z.string({ error: "must be a string" }).trim().max(200, { error: "must be at most 200 characters" }).optional(),
  })
  .strict();

export type RegistrationPolicy = FlotillaConfig["auth"]["registration"];

export const CLOSED_MESSAGE = "registration is closed on this deployment; ask its operator for an account";
export const INVALID_INVITE_MESSAGE = "this invite code is not valid (unknown, already used or expired)";
export const SETUP_MESSAGE =
  "the first account needs the setup code: open the Setup link the server printed when it started, or run `npm run --silent cli -- setup-code`";
export const SETUP_USED_MESSAGE = "this setup code is no longer valid: the first account exists; ask its admin for an invite";
export const INVITE_MESSAGE = "an invite code is needed to register; ask the admin of this deployment for one";

export async function registerUser(
  database: Database,
  args: { input: z.output<typeof registrationSchema>; policy: RegistrationPolicy; address: string },
): Promise<UserRecord> {
  // Busy (429) before anything is counted or written when too much hashing is in flight.
  return withHashAdmission(() => register(database, args));
}

async function register(
  database: Database,
  args: { input: z.output<typeof registrationSchema>; policy: RegistrationPolicy; address: string },
): Promise<UserRecord> {
  const { email, password, invite_code, setup_code } = args.input;
  await limitRegistration(database.sql, { email, address: args.address });
  // Refuse cheaply before the (deliberately slow) hash; the transaction below decides for real.
  if (args.policy === "closed") throw new AppError("forbidden", CLOSED_MESSAGE);
  const first = !(await anyUserExists(database.db));
  if (first && !(await setupCodeMatches(database.db, setup_code))) throw new AppError("forbidden", SETUP_MESSAGE);
  if (!first && setup_code) throw new AppError("forbidden", SETUP_USED_MESSAGE);
  if (!first && args.policy === "invite" && !invite_code) throw new AppError("forbidden", INVITE_MESSAGE);
  if (invite_code && !(await inviteIsOpen(database.db, invite_code))) throw new AppError("forbidden", INVALID_INVITE_MESSAGE);
  // Hash before the transaction: the advisory lock in insertUser is held for milliseconds.
  const passwordHash = await hashPassword(password);
  return database.db.transaction(async (tx) => {
    let inviteId: string | null = null;
    const user = await insertUser(tx, { email, passwordHash }, async (first) => {
      if (args.policy === "closed") throw new AppError("forbidden", CLOSED_MESSAGE);
      if (first && !(await setupCodeMatches(tx, setup_code))) throw new AppError("forbidden", SETUP_MESSAGE);
      if (!first && setup_code) throw new AppError("forbidden", SETUP_USED_MESSAGE);
      // A code that is sent is always spent (or refused), even where none is needed.
      if (!invite_code) {
        if (first || args.policy === "open") return;
        throw new AppError("forbidden", INVITE_MESSAGE);
      }
      inviteId = await redeemInvite(tx, invite_code);
      if (!inviteId) throw new AppError("forbidden", INVALID_INVITE_MESSAGE);
    });
    if (inviteId) await markInviteUsedBy(tx, inviteId, user.id);
    return user;
  });
}

/** What the register page must ask for right now. */
export type RegistrationMode = "first" | "open" | "invite" | "closed";

export async function registrationMode(database: Database, policy: RegistrationPolicy): Promise<RegistrationMode> {
  if (policy === "closed") return "closed";
  if (!(await anyUserExists(database.db))) return "first";
  return policy;
}
