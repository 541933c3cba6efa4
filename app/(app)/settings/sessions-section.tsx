import { Badge } from "@/components/ui/badge";
import { buttonClasses } from "@/components/ui/button";
import type { SessionView } from "@/server/auth/sessions";
import { signOutEverywhereAction } from "./actions";
import { SettingsSection, When } from "./section";

function device(userAgent: string | null): string {
  if (!userAgent) return "Unknown browser";
  const browser = /Firefox\//.test(userAgent) ? "Firefox" : /Edg\//.test(userAgent) ? "Edge" : /Chrome\//.test(userAgent) ? "Chrome" : /Safari\//.test(userAgent) ? "Safari" : "Browser";
  const os = /Android/.test(userAgent) ? "Android" : /iPhone|iPad/.test(userAgent) ? "iOS" : /Mac OS X/.test(userAgent) ? "macOS" : /Windows/.test(userAgent) ? "Windows" : /Linux/.test(userAgent) ? "Linux" : "";
  return os ? `${browser} on ${os}` : browser;
}

export function SessionsSection({ sessions }: { sessions: SessionView[] }) {
  return (
    <SettingsSection id="sessions" title="Sessions" description="Browsers signed in to your account. Signing out everywhere ends all of them, this one included. API tokens are not affected: they work until they expire or you revoke them.">
      <ul aria-label="Sessions" className="divide-y divide-zinc-100 rounded-lg border border-zinc-200">
        {sessions.map((s) => (
          <li key={s.id} className="flex flex-wrap items-center justify-between gap-2 px-3 py-2 text-sm">
            <span className="font-medium text-zinc-800">
              {device(s.user_agent)} {s.current && <Badge tone="green">This browser</Badge>}
            </span>
            <span className="text-zinc-500">
              signed in <When iso={s.created_at} />
            </span>
          </li>
        ))}
      </ul>
      <form action={signOutEverywhereAction} className="mt-4">
        <button type="submit" className={buttonClasses("danger", "sm")}>
          Sign out everywhere
        </button>
      </form>
    </SettingsSection>
  );
}
