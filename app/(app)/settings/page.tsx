import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { listInvites } from "@/server/auth/invites";
import { listSessions } from "@/server/auth/sessions";
import { listApiTokens } from "@/server/auth/tokens";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { InvitesSection } from "./invites-section";
import { SettingsSection } from "./section";
import { SessionsSection } from "./sessions-section";
import { TokensSection } from "./tokens-section";
import { PasswordForm } from "@/components/settings/password-form";
import { WebhookForm } from "@/components/settings/webhook-form";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Settings · Flotilla" };

/**
 * Account settings as independent sections (each a component built on SettingsSection):
 * sessions, password, API tokens, the batch webhook, and for the admin, invites.
 */
export default async function SettingsPage() {
  const user = await currentUser();
  if (!user) redirect("/signin");
  const db = getDatabase().db;
  const [sessions, tokens, invites] = await Promise.all([
    listSessions(db, { userId: user.id, currentSessionId: user.sessionId }),
    listApiTokens(db, { userId: user.id }),
    user.isAdmin ? listInvites(db) : Promise.resolve([]),
  ]);

  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-4 sm:p-6">
      <div className="mx-auto max-w-3xl space-y-6">
        <header>
          <h1 className="text-xl font-semibold tracking-tight">Settings</h1>
          <p className="mt-1 text-sm text-zinc-500">
            Signed in as {user.email}
            {user.isAdmin ? " · admin" : ""}
          </p>
        </header>
        <SessionsSection sessions={sessions} />
        <SettingsSection
          id="password"
          title="Password"
          description="Changing it signs out every other browser; this one stays signed in. API tokens keep working until you revoke them."
        >
          <PasswordForm />
        </SettingsSection>
        <TokensSection initialTokens={tokens} />
        {user.isAdmin && <InvitesSection invites={invites} policy={getConfig().auth.registration} />}
        <WebhookForm />
      </div>
    </div>
  );
}
