"use client";

import { useRouter } from "next/navigation";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { useOpenNewThread } from "./threads-api";

/** Opens a blank thread: the newest one when nothing was said in it yet, else a new one. */
export function NewThreadButton({ className = "", variant = "primary" }: { className?: string; variant?: "primary" | "secondary" }) {
  const router = useRouter();
  const create = useOpenNewThread();
  return (
    <div className={className}>
      <Button
        variant={variant}
        className="w-full"
        disabled={create.isPending}
        onClick={() =>
          create.mutate(undefined, {
            onSuccess: (thread) => router.push(`/threads/${thread.id}`),
          })
        }
      >
        {create.isPending ? <Spinner /> : <span aria-hidden="true">+</span>}
        New thread
      </Button>
      {create.error && (
        <p role="alert" className="mt-2 text-xs text-red-700">
          {create.error.message}
        </p>
      )}
    </div>
  );
}
