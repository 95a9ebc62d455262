"""MPI's dynamic processes through mpi4py, as a unittest module run on every
rank (bench/mpi4py_dynproc.sh runs it under mpirun and under dlaunch --mpi
side by side). mpi4py raises MPI errors as exceptions (MPI_ERRORS_RETURN),
which is how Python programs meet these calls. Each rank prints unittest's
summary line."""
import sys
import unittest

from mpi4py import MPI

WORLD = MPI.COMM_WORLD


class Names(unittest.TestCase):
    def test_publish_lookup_unpublish(self):
        service, port = "mpi4py-dynproc-test", "port-of-rank-0"
        if WORLD.rank == 0:
            MPI.Publish_name(service, port)
        WORLD.Barrier()
        self.assertEqual(MPI.Lookup_name(service), port)
        WORLD.Barrier()
        if WORLD.rank == 0:
            MPI.Unpublish_name(service, port)
        WORLD.Barrier()
        with self.assertRaises(MPI.Exception):
            MPI.Lookup_name(service)

    def test_publish_twice(self):
        # What a second publish of a name does is the runtime's to say; it
        # must answer (and the name must then be unpublished), never hang.
        if WORLD.rank == 0:
            MPI.Publish_name("mpi4py-twice", "a")
            try:
                MPI.Publish_name("mpi4py-twice", "b")
                print("second publish: accepted", flush=True)
            except MPI.Exception as e:
                print("second publish: refused,", e.Get_error_string(), flush=True)
            MPI.Unpublish_name("mpi4py-twice", "a")
        WORLD.Barrier()


class ConnectAccept(unittest.TestCase):
    def test_self_pairs(self):
        # Rank 0 accepts each other rank in turn, each on COMM_SELF through a
        # port of its own.
        for peer in range(1, WORLD.size):
            port = MPI.Open_port() if WORLD.rank == 0 else None
            port = WORLD.bcast(port, root=0)
            inter = None
            if WORLD.rank == 0:
                inter = MPI.COMM_SELF.Accept(port)
            elif WORLD.rank == peer:
                inter = MPI.COMM_SELF.Connect(port)
            if inter is not None:
                got = inter.sendrecv(WORLD.rank, dest=0, source=0)
                self.assertEqual(got, peer if WORLD.rank == 0 else 0)
                inter.Disconnect()
            WORLD.Barrier()
            if WORLD.rank == 0:
                MPI.Close_port(port)

    def test_world_halves(self):
        half = WORLD.size // 2
        accepting = WORLD.rank < half
        side = WORLD.Split(int(accepting), WORLD.rank)
        port = MPI.Open_port() if WORLD.rank == 0 else None
        port = WORLD.bcast(port, root=0)
        inter = side.Accept(port) if accepting else side.Connect(port)
        self.assertEqual(inter.remote_size, WORLD.size - half if accepting else half)
        total = inter.allreduce(WORLD.rank)
        there = range(half, WORLD.size) if accepting else range(0, half)
        self.assertEqual(total, sum(there))
        inter.Disconnect()
        side.Free()
        if WORLD.rank == 0:
            MPI.Close_port(port)


class Join(unittest.TestCase):
    def test_join_over_a_socket(self):
        # Ranks 0 and 1 join through a TCP connection on loopback.
        import socket
        if WORLD.rank == 0:
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            WORLD.send(server.getsockname()[1], dest=1)
            conn, _ = server.accept()
            server.close()
        elif WORLD.rank == 1:
            conn = socket.create_connection(("127.0.0.1", WORLD.recv(source=0)))
        if WORLD.rank in (0, 1):
            inter = MPI.Comm.Join(conn.fileno())
            self.assertEqual(inter.remote_size, 1)
            self.assertEqual(inter.sendrecv(WORLD.rank, dest=0, source=0), 1 - WORLD.rank)
            inter.Disconnect()
            conn.close()
        WORLD.Barrier()


class Spawn(unittest.TestCase):
    def test_spawn_self(self):
        child = MPI.COMM_SELF.Spawn(sys.executable, args=["-c", CHILD], maxprocs=1)
        self.assertEqual(child.remote_size, 1)
        self.assertEqual(child.recv(source=0), "child")
        child.Disconnect()


# The child: answers its parent and leaves.
CHILD = """
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
parent.send("child", dest=0)
parent.Disconnect()
"""

if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False, verbosity=0).result
    ok = "OK" if result.wasSuccessful() else "FAILED"
    print(f"rank {WORLD.rank}/{WORLD.size}: ran {result.testsRun}, failures {len(result.failures)},"
          f" errors {len(result.errors)}, skipped {len(result.skipped)}: {ok}", flush=True)
