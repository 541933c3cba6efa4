import { buttonClasses } from "./button";
import { Spinner } from "./spinner";

/** "Load more" at the end of a paged list: busy (and disabled) while the next page loads. */
export function LoadMoreButton({ loading, onLoad }: { loading: boolean; onLoad: () => void }) {
  return (
    <button type="button" onClick={onLoad} disabled={loading} aria-busy={loading || undefined} className={buttonClasses("secondary", "sm", "ml-auto")}>
      {loading ? <Spinner /> : null}
      Load more
    </button>
  );
}
