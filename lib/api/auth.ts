import { z } from "zod";

/** Wire types of the account API (tokens, sessions, invites). Never carries a token or code after creation. */

export const TOKEN_MAX_DAYS = 365;
/** A token created without `expires_in_days` lasts this long. */
export const TOKEN_DEFAULT_DAYS = 90;

export const tokenProjectionSchema = z.object({
  id: z.string(),
  name: z.string(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  expires_at: z.string().nullable(),
  expired: z.boolean(),
});
export type TokenProjection = z.infer<typeof tokenProjectionSchema>;

export const createTokenBodySchema = z
  .object({
    name: z.string({ error: "must be a string" }).trim().min(1, { error: "must not be empty" }).max(100, { error: "must be at most 100 characters" }),
    expires_in_days: z
      .number({ error: "must be a number" })
      .int({ error: "must be a whole number" })
      .min(1, { error: "must be at least 1" })
      .max(TOKEN_MAX_DAYS, { error: `must be at most ${TOKEN_MAX_DAYS}` })
      // null = never expires, allowed only from a browser session (server/auth/tokens.ts)
      .nullable()
      .optional(),
  })
  .strict();
export type CreateTokenBody = z.infer<typeof createTokenBodySchema>;

/** POST /api/tokens: the new token's row, with the token itself this once. */
export const createdTokenSchema = tokenProjectionSchema.extend({ token: z.string() });

/** POST /api/account/password: how many other browser sessions were signed out. */
export const passwordChangedSchema = z.object({ other_sessions_ended: z.number() });
