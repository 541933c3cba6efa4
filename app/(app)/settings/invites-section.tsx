"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition } from "react";
import { Badge } from "@/components/ui/badge";
import { OnceSecret } from "@/components/settings/once-secret";
import { Button } from "@/components/ui/button";
import type { InviteView } from "@/server/auth/invites";
import { createInviteAction } from "./actions";
import { SettingsSection, When } from "./section";

const TONE = { open: "blue", used: "neutral", expired: "red" } as const;

/** Admin only: single-use invite codes (auth.registration = invite). */
export function InvitesSection({ invites, policy }: { invites: InviteView[]; policy: string }) {
  const router = useRouter();
  const [code, setCode] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [pending, startTransition] = useTransition();

  function onCreate() {
    setError(null);
    startTransition(async () => {
      const result = await createInviteAction();
      if (!result.ok) {
        setError(result.error);
        return;
      }
      setCode(result.code);
      router.refresh();
    });
  }

  return (
    <SettingsSection
      id="invites"
      title="Invites"
      description={`Registration is “${policy}”. An invite code lets one person create an account within 7 days; it is shown once.`}
    >
      <Button onClick={onCreate} disabled={pending}>
        Create invite
      </Button>
      {error && (
        <p role="alert" className="mt-3 rounded-lg bg-red-50 px-3 py-2 text-sm text-red-700">
          {error}
        </p>
      )}
      {code && (
        <OnceSecret label="New invite code" value={code} title="Send this code to the person you invite (it will not be shown again):">
          <p className="mt-2 text-xs text-emerald-900">
            They enter it on the Create account page, or open{" "}
            <a className="font-medium underline" href={`/register?invite=${encodeURIComponent(code)}`}>
              this invite link
            </a>
            .
          </p>
        </OnceSecret>
      )}
      {invites.length > 0 && (
        <ul aria-label="Invites" className="mt-4 divide-y divide-zinc-100 rounded-lg border border-zinc-200">
          {invites.map((i) => (
            <li key={i.id} className="flex flex-wrap items-center justify-between gap-2 px-3 py-2 text-sm">
              <span>
                <Badge tone={TONE[i.status]}>{i.status}</Badge> <span className="text-zinc-600">{i.used_by ? `used by ${i.used_by}` : ""}</span>
              </span>
              <span className="text-xs text-zinc-500">
                created <When iso={i.created_at} /> · {i.status === "used" ? "used" : "expires"} <When iso={i.used_at ?? i.expires_at} />
              </span>
            </li>
          ))}
        </ul>
      )}
    </SettingsSection>
  );
}
