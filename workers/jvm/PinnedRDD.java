package rescaler.spark;

import java.util.List;

import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The parent's partitions, unchanged, each preferring the location given for it.
 *
 * <p>An epoch's PU tasks are the partitions of a shuffle (one per PU); Spark's scheduler places
 * a task by its partition's preferred locations, and a location {@code executor_<host>_<id>}
 * names one executor. This RDD gives partition i the location of PU i's home executor, so the
 * PU's task runs where its store is (workers/pinning.py). A partition with no location (an
 * empty string) keeps the parent's preferences.
 */
public class PinnedRDD<T> extends RDD<T> {
  private final RDD<T> parent;
  private final String[] locations;

  /** {@code locations}: partition i's location is the i-th of these, comma-separated. */
  @SuppressWarnings("unchecked")
  public PinnedRDD(RDD<T> parent, String locations) {
    super(parent, (ClassTag<T>) ClassTag$.MODULE$.AnyRef());
    this.parent = parent;
    this.locations = locations.split(",", -1);
  }

  @Override
  public Iterator<T> compute(Partition split, TaskContext context) {
    return parent.iterator(split, context);
  }

  @Override
  public Partition[] getPartitions() {
    return parent.partitions();
  }

  @Override
  public Seq<String> getPreferredLocations(Partition split) {
    int i = split.index();
    if (i < locations.length && !locations[i].isEmpty()) {
      return CollectionConverters.asScala(List.of(locations[i])).toSeq();
    }
    return parent.preferredLocations(split);
  }
}
