import { NotFoundMessage } from "@/components/ui/not-found-message";

/** Inside the app shell (sidebar stays): unknown and foreign threads alike. */
export default function ThreadNotFound() {
  return <NotFoundMessage />;
}
