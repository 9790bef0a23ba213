package io.engramhost.store;

/** Loads the tables a daemon will serve (the slow part of start-up), reporting progress. */
@FunctionalInterface
public interface CatalogBuilder {
    Catalog build(LoadProgress progress) throws Exception;
}
