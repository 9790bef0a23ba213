package io.engramhost.store;

import java.util.ArrayList;
import java.util.List;

/** Owns a list of resources and closes them in reverse order; a failure in one does not skip the rest. */
final class Regions<T extends AutoCloseable> implements AutoCloseable {
    private final List<T> items = new ArrayList<>();

    <U extends T> U add(U item) {
        items.add(item);
        return item;
    }

    List<T> items() {
        return items;
    }

    @Override
    public void close() throws Exception {
        Exception first = null;
        for (int i = items.size() - 1; i >= 0; i--) {
            try {
                items.get(i).close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        items.clear();
        if (first != null) {
            throw first;
        }
    }
}
