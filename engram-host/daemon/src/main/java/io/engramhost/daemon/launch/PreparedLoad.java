package io.engramhost.daemon.launch;

import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadReport;

/** What a load will make, and what is known of it before: the builder, and the report of its memory check. */
public record PreparedLoad(CatalogBuilder builder, LoadReport report) {
}
