import { NotFoundMessage } from "@/components/ui/not-found-message";

export default function NotFound() {
  return (
    <main className="flex min-h-full">
      <NotFoundMessage />
    </main>
  );
}
