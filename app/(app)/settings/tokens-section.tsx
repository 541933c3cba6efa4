"use client";

import { useState } from "react";
import { humanMessage } from "@/lib/human-message";
import { OnceSecret } from "@/components/settings/once-secret";
import { DEFAULT_EXPIRY, EXPIRY_CHOICES, expiresInDays, TokenExpiry } from "@/components/settings/token-expiry";
import { createdTokenSchema, createTokenBodySchema, type TokenProjection } from "@/lib/api/auth";
import { ApiError, request, sendJson } from "@/lib/api/client";
import { Badge } from "@/components/ui/badge";
import { Button } from "@/components/ui/button";
import { Field } from "@/components/ui/field";
import { SettingsSection, When } from "./section";

const FIELD_LABELS = { name: "Token name", expires_in_days: "Expiry" };

/** Personal API tokens through the tokens API (/api/tokens): list, create (shown once), revoke. */
export function TokensSection({ initialTokens }: { initialTokens: TokenProjection[] }) {
  const [tokens, setTokens] = useState(initialTokens);
  const [created, setCreated] = useState<{ name: string; token: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);

  async function onCreate(e: React.FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const formEl = e.currentTarget;
    const form = new FormData(formEl);
    // The API's own rules, checked before sending, in the form's words.
    const body = createTokenBodySchema.safeParse({
      name: String(form.get("name") ?? ""),
      expires_in_days: expiresInDays(String(form.get("expires_in_days") ?? DEFAULT_EXPIRY)),
    });
    if (!body.success) {
      const issue = body.error.issues[0];
      setError(humanMessage(`${issue.path.join(".")}: ${issue.message}`, FIELD_LABELS));
      return;
    }
    setError(null);
    setPending(true);
    try {
      const { token, ...view } = await sendJson(createdTokenSchema, "/api/tokens", "token", body.data);
      setCreated({ name: view.name, token });
      setTokens((list) => [view, ...list]);
      formEl.reset();
    } catch (err) {
      setError(humanMessage((err as Error).message, FIELD_LABELS));
    } finally {
      setPending(false);
    }
  }

  async function onRevoke(id: string) {
    setError(null);
    try {
      await request(`/api/tokens/${encodeURIComponent(id)}`, { method: "DELETE" });
    } catch (err) {
      // Already gone is what was asked for.
      if (!(err instanceof ApiError && err.status === 404)) {
        setError(`Could not revoke the token: ${(err as Error).message}`);
        return;
      }
    }
    setTokens((list) => list.filter((t) => t.id !== id));
    setCreated((c) => (c && tokens.find((t) => t.id === id)?.name === c.name ? null : c));
  }

  return (
    <SettingsSection id="tokens" title="API tokens" description="For scripts and SDKs: send as Authorization: Bearer <token>. A token is shown once, when it is created, and works until it expires or you revoke it (signing out or changing the password does not end it).">
      <form onSubmit={onCreate} className="grid gap-3 sm:grid-cols-[1fr_10rem_auto] sm:items-end" noValidate>
        <Field label="Token name" id="token-name" name="name" required maxLength={100} placeholder="e.g. nightly import" />
        <div className="space-y-1.5">
          <label htmlFor="token-expiry" className="block text-sm font-medium text-zinc-700">
            Expires after
          </label>
          <select
            id="token-expiry"
            name="expires_in_days"
            defaultValue={DEFAULT_EXPIRY}
            className="block h-10 w-full rounded-lg border border-zinc-300 bg-white px-3 text-sm text-zinc-900 shadow-xs focus:border-zinc-500 focus:ring-2 focus:ring-zinc-200 focus:outline-none"
          >
            {EXPIRY_CHOICES.map((c) => (
              <option key={c.value} value={c.value}>
                {c.label}
              </option>
            ))}
          </select>
        </div>
        <Button type="submit" disabled={pending}>
          Create token
        </Button>
      </form>
      {error && (
        <p role="alert" className="mt-3 rounded-lg bg-red-50 px-3 py-2 text-sm text-red-700">
          {error}
        </p>
      )}
      {created && (
        <OnceSecret label="New token" value={created.token} title={`Token “${created.name}” created. Copy it now: it will not be shown again.`} />
      )}
      {tokens.length === 0 ? (
        <p className="mt-4 text-sm text-zinc-500">No tokens yet.</p>
      ) : (
        <ul aria-label="API tokens" className="mt-4 divide-y divide-zinc-100 rounded-lg border border-zinc-200">
          {tokens.map((t) => (
            <li key={t.id} className="flex flex-wrap items-center justify-between gap-2 px-3 py-2 text-sm">
              <div className="min-w-0">
                <div className="font-medium text-zinc-800">
                  {t.name} {t.expired && <Badge tone="red">Expired</Badge>}
                </div>
                <div className="text-xs text-zinc-500">
                  created <When iso={t.created_at} /> · last used <When iso={t.last_used_at} /> ·{" "}
                  <TokenExpiry expiresAt={t.expires_at} expired={t.expired} />
                </div>
              </div>
              <Button variant="danger" size="sm" onClick={() => onRevoke(t.id)} aria-label={`Revoke ${t.name}`}>
                Revoke
              </Button>
            </li>
          ))}
        </ul>
      )}
    </SettingsSection>
  );
}
