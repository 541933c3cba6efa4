import Link from "next/link";
import { buttonClasses } from "./button";

export function NotFoundMessage() {
  return (
    <div className="flex min-h-full flex-1 items-center justify-center p-8">
      <div className="max-w-sm text-center">
        <p className="text-sm font-medium text-zinc-500">404</p>
        <h1 className="mt-1 text-xl font-semibold tracking-tight">Not found</h1>
        <p className="mt-2 text-sm text-zinc-500">This page does not exist, or it is not yours.</p>
        <Link href="/" className={buttonClasses("secondary", "md", "mt-6")}>
          Back to your threads
        </Link>
      </div>
    </div>
  );
}
