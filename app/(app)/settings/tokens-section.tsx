"use client";

import { useState } from "react";
import type { TokenProjection } from "@/lib/api/auth";
import { Badge } from "@/components/ui/badge";
import { Button } from "@/components/ui/button";
import { Field } from "@/components/ui/field";
import { SettingsSection, When } from "./section";

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
    const days = String(form.get("expires_in_days") ?? "").trim();
    setError(null);
    setPending(true);
    const res = await fetch("/api/tokens", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: String(form.get("name") ?? ""), ...(days ? { expires_in_days: Number(days) } : {}) }),
    });
    const body = await res.json().catch(() => null);
    setPending(false);
    if (!res.ok) {
      setError(body?.error?.message ?? `Could not create the token (HTTP ${res.status}).`);
      return;
    }
    const { token, ...view } = body as TokenProjection & { token: string };
    setCreated({ name: view.name, token });
    setTokens((list) => [view, ...list]);
    formEl.reset();
  }

  async function onRevoke(id: string) {
    setError(null);
    const res = await fetch(`/api/tokens/${id}`, { method: "DELETE" });
    if (!res.ok && res.status !== 404) {
      setError(`Could not revoke the token (HTTP ${res.status}).`);
      return;
    }
    setTokens((list) => list.filter((t) => t.id !== id));
    setCreated((c) => (c && tokens.find((t) => t.id === id)?.name === c.name ? null : c));
  }

  return (
    <SettingsSection id="tokens" title="API tokens" description="For scripts and SDKs: send as Authorization: Bearer <token>. A token is shown once, when it is created.">
      <form onSubmit={onCreate} className="grid gap-3 sm:grid-cols-[1fr_10rem_auto] sm:items-end" noValidate>
        <Field label="Token name" id="token-name" name="name" required maxLength={100} placeholder="e.g. nightly import" />
        <Field label="Expires in days" id="token-days" name="expires_in_days" type="number" min={1} max={3650} placeholder="never" />
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
        <div role="status" className="mt-3 rounded-lg border border-emerald-200 bg-emerald-50 p-3 text-sm">
          <p className="font-medium text-emerald-900">Token “{created.name}” created. Copy it now: it will not be shown again.</p>
          <input aria-label="New token" readOnly value={created.token} onFocus={(e) => e.currentTarget.select()} className="mt-2 block w-full rounded border border-zinc-200 bg-white px-2 py-1 font-mono text-xs text-zinc-900" />
        </div>
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
                  {t.expires_at ? (
                    <>
                      expires <When iso={t.expires_at} />
                    </>
                  ) : (
                    "no expiry"
                  )}
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
