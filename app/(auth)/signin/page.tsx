import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { safeCallbackUrl } from "../safe-callback";
import { SignInForm } from "./signin-form";

export const metadata: Metadata = { title: "Sign in · Flotilla" };
export const dynamic = "force-dynamic";

export default async function SignInPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  const params = await searchParams;
  const callbackUrl = safeCallbackUrl(params.callbackUrl);
  if (await currentUser()) redirect(callbackUrl);
  return <SignInForm callbackUrl={callbackUrl} />;
}
