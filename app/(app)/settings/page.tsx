import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { WebhookForm } from "@/components/settings/webhook-form";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Settings · Flotilla" };

/** Minimal settings page carrying the webhook form (the full settings page mounts it at merge). */
export default async function SettingsPage() {
  const user = await currentUser();
  if (!user) redirect("/signin?callbackUrl=%2Fsettings");
  return (
    <div className="mx-auto flex w-full max-w-2xl flex-col gap-4 overflow-y-auto p-4">
      <h1 className="text-lg font-semibold">Settings</h1>
      <WebhookForm />
    </div>
  );
}
