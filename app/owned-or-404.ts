import { notFound } from "next/navigation";
import { AppError } from "@/server/errors";

/** For a page: someone else's thread or batch and one that does not exist look the same, Next's 404. */
export async function ownedOr404<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    if (err instanceof AppError && err.code === "not_found") notFound();
    throw err;
  }
}
