C     An NX program in Fortran 77: identity, csend/crecv, crecvx's info,
C     irecv/msgwait, iprobe, global sums of DOUBLE PRECISION and INTEGER,
C     a logical and, a handler receive, msgmerge and isendrecv ids,
C     gsync and dclock.
      PROGRAM FTEST
      INTEGER ME, N, RIGHT, LEFT, INFO(4), MID, K, IV(3), LV(2)
      INTEGER MYNODE, NUMNODES, INFOCOUNT, INFONODE, IRECV, IPROBE
      INTEGER MYPTYPE, GRAY, GINV, NX_MKPART, MCLOCK, HW(2)
      INTEGER ISEND, MSGMERGE, ISENDRECV, MSGDONE, M1, M2
      DOUBLE PRECISION X(2), WORK(2), T0, DCLOCK
      INTEGER SBUF(4), RBUF(4), HBUF(2)
      INTEGER HTYPE, HCOUNT, HNODE
      COMMON /HCOM/ HTYPE, HCOUNT, HNODE
      EXTERNAL ONMSG
      ME = MYNODE()
      N = NUMNODES()
      RIGHT = MOD(ME + 1, N)
      LEFT = MOD(ME + N - 1, N)
      IF (MYPTYPE() .NE. 0) CALL FAIL(ME, 'myptype')
      IF (GINV(GRAY(13)) .NE. 13) CALL FAIL(ME, 'gray')
C     partitions do not exist here: NX's error, and nx_perror says why
      IF (NX_MKPART('p', 2, 0) .NE. -1) CALL FAIL(ME, 'nx_mkpart')
      IF (ME .EQ. 0) CALL NX_PERROR('fortran mkpart')
      CALL HWCLOCK(HW)
      IF (MCLOCK() .LT. 0 .OR. (HW(1) .EQ. 0 .AND. HW(2) .EQ. 0))
     &   CALL FAIL(ME, 'clocks')
      HTYPE = -1
      CALL HRECV(50, HBUF, 8, ONMSG)
      CALL GSYNC()
C     around the ring
      DO 10 K = 1, 4
         SBUF(K) = ME * 100 + K
   10 CONTINUE
      CALL CSEND(7, SBUF, 16, RIGHT, 0)
      CALL CRECVX(7, RBUF, 16, LEFT, -1, INFO)
      IF (INFO(1) .NE. 7 .OR. INFO(2) .NE. 16 .OR. INFO(3) .NE. LEFT)
     &   CALL FAIL(ME, 'crecvx info')
      IF (RBUF(4) .NE. LEFT * 100 + 4) CALL FAIL(ME, 'ring data')
      MID = IRECV(8, RBUF, 16)
      CALL CSEND(8, SBUF, 12, RIGHT, 0)
      CALL MSGWAIT(MID)
      IF (INFOCOUNT() .NE. 12 .OR. INFONODE() .NE. LEFT)
     &   CALL FAIL(ME, 'irecv info')
      IF (IPROBE(-1) .NE. 0) CALL FAIL(ME, 'iprobe')
C     global operations
      X(1) = ME + 1
      X(2) = 0.5D0
      CALL GDSUM(X, 2, WORK)
      IF (X(1) .NE. N * (N + 1) / 2 .OR. X(2) .NE. 0.5D0 * N)
     &   CALL FAIL(ME, 'gdsum')
      IV(1) = ME
      IV(2) = 1
      IV(3) = -ME
      CALL GISUM(IV, 3, WORK)
      IF (IV(1) .NE. N * (N - 1) / 2 .OR. IV(2) .NE. N
     &   .OR. IV(3) .NE. -N * (N - 1) / 2) CALL FAIL(ME, 'gisum')
      LV(1) = 1
      LV(2) = ME
      CALL GLAND(LV, 2, WORK)
      IF (LV(1) .NE. 1 .OR. LV(2) .NE. 0) CALL FAIL(ME, 'gland')
C     the handler receive: node LEFT sends to this node
      CALL CSEND(50, SBUF, 8, RIGHT, 0)
      T0 = DCLOCK()
   20 IF (HTYPE .LT. 0 .AND. DCLOCK() - T0 .LT. 30.0D0) THEN
         CALL FLICK()
         GOTO 20
      END IF
      IF (HTYPE .NE. 50 .OR. HCOUNT .NE. 8 .OR. HNODE .NE. LEFT)
     &   CALL FAIL(ME, 'handler')
      IF (HBUF(1) .NE. LEFT * 100 + 1) CALL FAIL(ME, 'handler data')
C     merged ids and isendrecv's: INTEGERs that the message calls take
      RBUF(1) = -1
      M1 = IRECV(9, RBUF, 16)
      M2 = ISEND(9, SBUF, 16, RIGHT, 0)
      MID = MSGMERGE(M1, M2)
      IF (MID .LE. 0) CALL FAIL(ME, 'msgmerge id')
      CALL MSGWAIT(MID)
      IF (RBUF(1) .NE. LEFT * 100 + 1) CALL FAIL(ME, 'merged data')
      RBUF(2) = -1
      MID = ISENDRECV(10, SBUF, 16, RIGHT, 0, 10, RBUF, 16)
      IF (MID .LE. 0) CALL FAIL(ME, 'isendrecv id')
   30 IF (MSGDONE(MID) .EQ. 0) GOTO 30
      IF (RBUF(2) .NE. LEFT * 100 + 2) CALL FAIL(ME, 'isendrecv data')
      CALL GSYNC()
      WRITE (*, '(A, I0, A)') 'ftest node ', ME, ': ok'
      END

      SUBROUTINE ONMSG(TYPE, COUNT, NODE, PTYPE)
      INTEGER TYPE, COUNT, NODE, PTYPE
      INTEGER HTYPE, HCOUNT, HNODE
      COMMON /HCOM/ HTYPE, HCOUNT, HNODE
      HCOUNT = COUNT
      HNODE = NODE
      HTYPE = TYPE
      END

      SUBROUTINE FAIL(ME, WHAT)
      INTEGER ME
      CHARACTER*(*) WHAT
      WRITE (*, '(A, I0, A, A)') 'ftest node ', ME, ': failed: ', WHAT
      CALL EXIT(2)
      END
