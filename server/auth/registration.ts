import "server-only";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import type { Database } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { inviteIsOpen, markInviteUsedBy, redeemInvite } from "./invites";
import { limitRegistration } from "./limits";
import { hashPassword } from "./password";
import { anyUserExists, emailSchema, insertUser, passwordSchema, type UserRecord } from "./users";

/**
 * Self-service sign-up under `auth.registration`:
 * - `open`: anyone may register;
 * - `invite` (default): a valid, unused, unexpired invite code is needed;
 * - `closed`: only the CLI creates accounts.
 * The first account ever created becomes the admin and needs no code (except when closed), so a
 * fresh deployment can be set up from the browser. A code that is sent must be valid and is
 * spent, whatever the policy (an invite link works on an open deployment too).
 */

export const registrationSchema = z
  .object({
    email: emailSchema,
    password: passwordSchema,
    invite_code: z.string({ error: "must be a string" }).trim().max(200, { error: "must be at most 200 characters" }).optional(),
  })
  .strict();

export type RegistrationPolicy = FlotillaConfig["auth"]["registration"];

export const CLOSED_MESSAGE = "registration is closed on this deployment; ask its operator for an account";
export const INVALID_INVITE_MESSAGE = "this invite code is not valid (unknown, already used or expired)";
export const INVITE_MESSAGE = "an invite code is needed to register; ask the admin of this deployment for one";

export async function registerUser(
  database: Database,
  args: { input: z.output<typeof registrationSchema>; policy: RegistrationPolicy; address: string },
): Promise<UserRecord> {
  const { email, password, invite_code } = args.input;
  await limitRegistration(database.sql, { email, address: args.address });
  // Refuse cheaply before the (deliberately slow) hash; the transaction below decides for real.
  if (args.policy === "closed") throw new AppError("forbidden", CLOSED_MESSAGE);
  if (args.policy === "invite" && !invite_code && (await anyUserExists(database.db))) throw new AppError("forbidden", INVITE_MESSAGE);
  if (invite_code && !(await inviteIsOpen(database.db, invite_code))) throw new AppError("forbidden", INVALID_INVITE_MESSAGE);
  // Hash before the transaction: the advisory lock in insertUser is held for milliseconds.
  const passwordHash = await hashPassword(password);
  return database.db.transaction(async (tx) => {
    let inviteId: string | null = null;
    const user = await insertUser(tx, { email, passwordHash }, async (first) => {
      if (args.policy === "closed") throw new AppError("forbidden", CLOSED_MESSAGE);
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
