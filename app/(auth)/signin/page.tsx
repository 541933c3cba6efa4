import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { anyUserExists } from "@/server/auth/users";
import { getDatabase } from "@/server/db/client";
import { safeCallbackUrl } from "../safe-callback";
import { SignInForm } from "./signin-form";

export const metadata: Metadata = { title: "Sign in · Flotilla" };
export const dynamic = "force-dynamic";

export default async function SignInPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  const params = await searchParams;
  const callbackUrl = safeCallbackUrl(params.callbackUrl);
  if (await currentUser()) redirect(callbackUrl);
  // A fresh deployment: say where the first account comes from (the Setup link in the server's log).
  const firstVisit = !(await anyUserExists(getDatabase().db));
  return <SignInForm callbackUrl={callbackUrl} firstVisit={firstVisit} />;
}
